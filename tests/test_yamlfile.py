"""User-given YAML files: a key given twice is refused with both lines, oversized and unreadable files
with one line each; LibYAML parses where it is built in."""
import pytest
import yaml

from tuner.core.errors import ProblemError
from tuner.core.layers import load_layers
from tuner.core.yamlfile import YamlFileError, _StrictLoader, read_yaml

TABLE = """defaults: {pad: 0}
layers:
  a: {n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1}
  b: {n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1}
  a: {n: 2, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1}
"""


def test_a_key_given_twice_names_both_lines(tmp_path):
    path = tmp_path / "layers.yaml"
    path.write_text(TABLE)
    with pytest.raises(YamlFileError) as error:
        read_yaml(path, "layer table")
    assert str(error.value) == f"layer table {path}: 'a' is given twice, at lines 3 and 5; keep one"
    with pytest.raises(ProblemError, match="given twice, at lines 3 and 5"):
        load_layers(path)


def test_nested_duplicates_and_clean_files(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("family: sm80\nlayers:\n  x: {n: 1, n: 2}\n")
    with pytest.raises(YamlFileError, match="'n' is given twice, at lines 3 and 3"):
        read_yaml(path, "search space")
    path.write_text("family: sm80\ntile: [64x64x32, 64x64x32]\n")  # repeats in a list are the parser's business
    assert read_yaml(path, "search space") == {"family": "sm80", "tile": ["64x64x32", "64x64x32"]}


def test_size_directory_and_binary(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 << 20))
    with pytest.raises(YamlFileError, match="is 2.0 MB; files over 1 MB are refused"):
        read_yaml(big, "layer table", max_bytes=1 << 20)
    with pytest.raises(YamlFileError, match="is a directory"):
        read_yaml(tmp_path, "layer table")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 10)
    with pytest.raises(YamlFileError, match="cannot be read"):
        read_yaml(binary, "layer table")


def test_libyaml_parses_where_it_is_built_in():
    if hasattr(yaml, "CSafeLoader"):
        assert issubclass(_StrictLoader, yaml.CSafeLoader)


def test_a_failures_reason_is_one_line_cut_to_its_limit_and_none_when_absent():
    from tuner.core.yamlfile import brief_reason

    assert brief_reason("error: a\n  b\tc\n") == "error: a b c"
    assert brief_reason(" \n ") == "" and brief_reason(None) is None
    assert brief_reason("x" * 400, limit=10) == "x" * 9 + "…"


def test_the_results_text_reads_back_as_the_document_it_was_made_from():
    import yaml
    from tuner.core.yamlfile import dump_yaml

    document = {"layers": {"b": {"message": "memory-bound: 9.64 MB, 3.21 µs at 3000 GB/s; " + "long words " * 12,
                                 "runtime_us": 3.21, "params": {"tile": "128x64x64", "split_k": 0}},
                           "a": {"runtime_us": 1.0}}}
    text = dump_yaml(document, width=110)
    assert yaml.safe_load(text) == document
    assert list(yaml.safe_load(text)["layers"]) == ["b", "a"]  # the caller's order, not sorted
    assert text.isascii()  # µ is escaped, as safe_dump wrote it
