"""Server paths left out of text a visitor reads (errors, toasts, a failed job's line).

Why one place: a message may quote any folder the server writes to, not only the store's. On a
Space the store sits on /data and temporary files under /tmp: an export that fails on a full temp
disk quoted `/tmp/pattrieval-downloads/<id>/...`, which masking by the store's folder missed
. So known folders (temp, Gradio's uploads, caches, home, the working folder, Python's
prefix, this checkout) are replaced by name, and then any other absolute path by its last part:
POSIX paths, and Windows ones too (`C:\\Users\\...`, `C:/...`, `\\\\server\\share\\...`), which a
Windows operator's DuckDB and OS errors quote, with spaces inside quotes ("C:\\Users\\Jo Ann\\x").
"""

from __future__ import annotations

import ntpath
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping

HIDDEN = "…"  # what a visitor sees in place of a server folder

# Environment variables naming folders the app, Gradio, DuckDB or the Hub cache write to.
_FOLDER_VARIABLES = ("TMPDIR", "TEMP", "TMP", "GRADIO_TEMP_DIR", "HF_HOME", "HF_HUB_CACHE",
                     "HF_DATASETS_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "XDG_CACHE_HOME",
                     "XDG_DATA_HOME", "PATTRIEVAL_CACHE", "PATTRIEVAL_DB")

# An absolute POSIX path: at the start or after white space, a quote, an opening bracket, `=` or
# `,`, so never inside a word, a URL, a relative path or markup (`a/b`, `http://h/p`, `</b>`); it
# ends at white space, a quote, a bracket or punctuation that never ends a file name in our
# messages. A path that follows an already masked folder (`…/x/y`) is shortened the same way.
_ABSOLUTE = re.compile(r"(?:…|^|(?<=[\s'\"`(\[{=,]))(/[^\s'\"`<>()\[\]{},;:|]+)")
# The start of an absolute Windows path: a drive and a slash either way (`C:\`, `C:/`: one letter
# after a boundary, so never `A:B`, `12:30` or a URL's `http:`), or a UNC share
# (`\\server\share\`, `\\?\C:\`, `\\?\UNC\server\`: a name and a backslash after the two, so never
# a bare `\\n`). In quotes it runs to the closing quote, spaces and all (`C:\Users\Jo Ann\x` is
# one path, as DuckDB quotes it); elsewhere to what no Windows file name holds, or to white space
# unless the word after it goes on with a backslash (`C:\Users\Jo Ann\x`: "Ann" is no one's business).
_WINDOWS_START = r"(?:[A-Za-z]:[\\/]|\\\\(?:[?.]\\)?(?:[A-Za-z]:|[\w.$-]+)\\)"
_WINDOWS_QUOTED = re.compile(rf"(?<=[\"'])({_WINDOWS_START}[^\"'\n<>|*?:]*)(?=[\"'])")
_WINDOWS_PART = r"[^\s'\"`<>()\[\]{},;:|*?]"
_WINDOWS_WORD = r"[^\s'\"`<>()\[\]{},;:|*?\\]+"  # a part without a backslash
_WINDOWS = re.compile(rf"(?:^|(?<=[\s\"'`(\[{{=,]))"
                      rf"({_WINDOWS_START}{_WINDOWS_PART}*(?: {_WINDOWS_WORD}\\{_WINDOWS_PART}*)*)")


def server_folders(extra: Iterable[str | os.PathLike[str]] = ()) -> list[str]:
    """Folders of this server a message may quote: temp (Python's and Gradio's upload folder),
    caches, home, the working folder, Python's prefix and this checkout, plus `extra`; each as
    given and resolved. Read at call time (tests and the entry point change the environment)."""
    temp = tempfile.gettempdir()
    folders: list[str] = [temp, os.path.join(temp, "gradio"), os.path.expanduser("~"),
                          os.path.join(os.path.expanduser("~"), ".cache"), os.getcwd(), sys.prefix,
                          sys.base_prefix, os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "/data"]
    folders += [os.environ[name] for name in _FOLDER_VARIABLES if os.environ.get(name)]
    folders += [os.fspath(f) for f in extra]
    out: list[str] = []
    for folder in folders:
        for form in (folder, os.path.abspath(folder), os.path.realpath(folder)):
            form = form.rstrip(os.sep)
            if len(form.strip(os.sep)) > 1 and form not in out:  # never "/" or "/a"
                out.append(form)
    return out


def path_replacer(named: Mapping[str, str]) -> Callable[[str], str]:
    """A function replacing each path in `named` by its text, longest first, and only whole: the
    folder /data does not touch /database. A file's path also replaces its own suffixes (x.wal)."""
    names = {k: v for k, v in named.items() if len(k.strip(os.sep)) > 1}
    if not names:
        return lambda text: text
    alternatives = "|".join(re.escape(k) for k in sorted(names, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w.~-])(?:{alternatives})(?![\w-])")
    return lambda text: pattern.sub(lambda m: names[m.group(0)], text)


def mask_server_paths(text: str, named: Mapping[str, str] | None = None,
                      folders: Iterable[str | os.PathLike[str]] = ()) -> str:
    """`text` with the paths in `named` replaced by their text, every server folder (and
    `folders`) by "…", and any other absolute path by "…/" and its last part."""
    known = {f: HIDDEN for f in server_folders(folders)}
    known.update(named or {})
    text = path_replacer(known)(text)
    for windows in (_WINDOWS_QUOTED, _WINDOWS):  # ntpath: its last part after either slash
        text = windows.sub(lambda m: _last_part(ntpath.basename(m.group(1).rstrip("\\/"))), text)
    return _ABSOLUTE.sub(lambda m: _last_part(os.path.basename(m.group(1).rstrip("/"))), text)


def _last_part(name: str) -> str:
    return f"{HIDDEN}/{name}".rstrip("/")
