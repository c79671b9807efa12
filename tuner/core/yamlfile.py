"""YAML files a user hands the tool (layer tables, search spaces) and those it reads back (best.yaml,
bench.yaml): LibYAML's parser where it is built in (pure-Python parsing of a 50 MB file took minutes), a
size limit that holds whatever `stat` says (/dev/zero reports size 0), anchors and aliases refused (a
400-byte alias bomb expanded to 6 GB), and a mapping key given twice refused with both lines instead of the
last one silently winning."""
from __future__ import annotations

import stat
from pathlib import Path

import yaml

MAX_BYTES = 8 << 20  # far above any real layer table or space (ResNet-50's table is 4 KB)
_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class YamlFileError(ValueError):
    """A YAML file that cannot be used; the message is one line that says how to mend it."""


def brief(value: object, limit: int = 60) -> str:
    """repr(value) cut to about `limit` characters, for messages about values a file may make huge."""
    text = repr(value) if not isinstance(value, (list, dict, tuple, set)) or len(value) < 1000 else \
        f"<{type(value).__name__} of {len(value)} items>"
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def brief_reason(text: str | None, limit: int = 300) -> str | None:
    """A failure's reason on one line, short enough for bench.yaml and the console (nvcc's can run to pages)."""
    if not text:
        return None
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def dump_yaml(document: object, width: int = 80) -> str:
    """The results files' text (best.yaml, bench.yaml): LibYAML's emitter where it is built in, a third of the
    pure-Python one's time (1.0 against 0.3 s for a 480-layer best.yaml, written after every layer's tune)."""
    return yaml.dump(document, Dumper=_DUMPER, sort_keys=False, width=width, allow_unicode=False)


class _StrictLoader(_BASE):  # type: ignore[misc, valid-type]
    def get_single_data(self):
        node = self.get_single_node()
        if node is None:
            return None
        _refuse_aliases(node)
        return self.construct_document(node)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise YamlFileError(f"{key!r} is given twice, at lines {seen[key]} and {line}; keep one")
                seen[key] = line
            except TypeError:  # an unhashable key: the base constructor says so
                break
        return super().construct_mapping(node, deep)


def _refuse_aliases(root) -> None:
    """An alias makes its anchor's node appear twice in the tree (the composer shares it): refused at the
    second sight, before anything is constructed, so nothing is ever expanded."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            line = node.start_mark.line + 1 if node.start_mark else "?"
            raise YamlFileError(f"an anchor (&) used again as an alias (*) near line {line}; anchors and aliases "
                                "are refused: write the value out")
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def read_text(path: Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of `path`, at most `max_bytes` read whatever `stat` says (a character device reports
    size 0); YamlFileError (one line) when it is missing, a directory, too large, binary or unreadable."""
    try:
        status = path.stat()
        if stat.S_ISDIR(status.st_mode):
            raise YamlFileError(f"{what} {path} is a directory; pass a YAML file")
        size = status.st_size
        if size > max_bytes:
            raise YamlFileError(f"{what} {path} is {size / 2**20:.1f} MB; files over {max_bytes / 2**20:g} MB are "
                                "refused (is it the right file?)")
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise YamlFileError(f"{what} {path} holds more than {max_bytes / 2**20:g} MB; larger files are refused "
                                "(is it the right file?)")
        return data.decode("utf-8")
    except FileNotFoundError:
        raise YamlFileError(f"{what} {path} not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise YamlFileError(f"{what} {path} cannot be read ({type(error).__name__}); pass a YAML text file") from None


def read_yaml(path: Path, what: str, max_bytes: int = MAX_BYTES) -> object:
    """The document in `path`; YamlFileError (one line naming the file and the fix) when it is missing,
    unreadable, too large, not YAML, uses an alias, or gives a key twice."""
    return parse_yaml(read_text(path, what, max_bytes), path, what)


def parse_yaml(text: str, path: Path, what: str) -> object:
    """The document `text` (read from `path`) holds, refused as read_yaml refuses it."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except YamlFileError as error:
        raise YamlFileError(f"{what} {path}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlFileError(f"{what} {path} is not valid YAML{where}; fix the file") from None
