"""YAML files a user hands the tool (layer tables, search spaces): LibYAML's parser where it is built in
(pure-Python parsing of a 50 MB file took minutes), a size limit, and a mapping key given twice refused
with both lines instead of the last one silently winning."""
from __future__ import annotations

import stat
from pathlib import Path

import yaml

MAX_BYTES = 8 << 20  # far above any real layer table or space (ResNet-50's table is 4 KB)
_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlFileError(ValueError):
    """A YAML file that cannot be used; the message is one line that says how to mend it."""


class _StrictLoader(_BASE):  # type: ignore[misc, valid-type]
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


def read_yaml(path: Path, what: str, max_bytes: int = MAX_BYTES) -> object:
    """The document in `path`; YamlFileError (one line naming the file and the fix) when it is missing,
    unreadable, too large, not YAML, or gives a key twice."""
    try:
        status = path.stat()
        if stat.S_ISDIR(status.st_mode):
            raise YamlFileError(f"{what} {path} is a directory; pass a YAML file")
        size = status.st_size
        if size > max_bytes:
            raise YamlFileError(f"{what} {path} is {size / 2**20:.1f} MB; files over {max_bytes / 2**20:g} MB are "
                                "refused (is it the right file?)")
        text = path.read_text()
    except FileNotFoundError:
        raise YamlFileError(f"{what} {path} not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise YamlFileError(f"{what} {path} cannot be read ({type(error).__name__}); pass a YAML text file") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except YamlFileError as error:
        raise YamlFileError(f"{what} {path}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlFileError(f"{what} {path} is not valid YAML{where}; fix the file") from None
