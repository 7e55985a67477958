"""The on-disk cache of compiled object code, so a restarted kernel does not recompile.

Entries are keyed by a fingerprint of the optimized module and of everything the machine
code depends on (code generator source, LLVM version, CPU name and features), and again by the
kernels' LLVM IR with their symbols replaced by their places (``codegen/object_keys.py``: the
same program under other instruction names, which a fresh trace gives, finds the code too).  The directory
is private to the user (0700, files 0600); an entry whose key, format or checksum does not
match is ignored and rebuilt, never loaded.  ``NBXLA_CACHE_DIR`` moves it; ``NBXLA_CACHE_DIR=off``
turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile

FORMAT = 1


def default_directory() -> str | None:
    configured = os.environ.get("NBXLA_CACHE_DIR")
    if configured == "off":
        return None
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nbxla")


class PersistentCache:
    def __init__(self, directory: str):
        self.directory = directory
        self.hits = self.misses = self.rejected = 0

    def _private_dir(self) -> bool:
        """Create the directory 0700; refuse one that others may write to or that is not ours."""
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            st = os.stat(self.directory)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not (st.st_mode & 0o022)

    def _paths(self, key: str) -> tuple[str, str]:
        return (os.path.join(self.directory, key + ".json"), os.path.join(self.directory, key + ".o"))

    def load(self, key: str) -> tuple[dict, bytes] | None:
        meta_path, obj_path = self._paths(key)
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            with open(obj_path, "rb") as f:
                obj = f.read()
        except (OSError, ValueError):
            self.misses += 1
            return None
        if meta.get("key") != key or meta.get("format") != FORMAT or \
                meta.get("object_sha256") != hashlib.sha256(obj).hexdigest():
            self.rejected += 1
            return None
        self.hits += 1
        return meta, obj

    def save(self, key: str, meta: dict, obj: bytes) -> None:
        if not self._private_dir():
            return
        meta = dict(meta, key=key, format=FORMAT, object_sha256=hashlib.sha256(obj).hexdigest())
        meta_path, obj_path = self._paths(key)
        # Object first, metadata last: a reader never sees metadata for a missing object.
        for path, data in ((obj_path, obj), (meta_path, json.dumps(meta).encode())):
            fd, tmp = tempfile.mkstemp(dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)       # mkstemp files are 0600
            except OSError:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                return


def default_cache() -> PersistentCache | None:
    directory = default_directory()
    return PersistentCache(directory) if directory else None
