"""Packs files into a zip the way other writers do, for the .npz reader's tests (needs only the standard library).

usage: zip_members.py OUT MODE NAME=FILE...
MODE: zip64     -- ZIP64 extra fields on every member, as numpy.savez writes them
      stream    -- written to a non-seekable stream: data descriptors after each member
      deflate   -- deflated members, as numpy.savez_compressed writes them
"""
import sys
import zipfile


class Unseekable:
    """A write-only stream: zipfile must then use data descriptors."""

    def __init__(self, f):
        self._f = f

    def write(self, b):
        return self._f.write(b)

    def flush(self):
        self._f.flush()


def main():
    out, mode, members = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(out, "wb") as f:
        target = Unseekable(f) if mode == "stream" else f
        method = zipfile.ZIP_DEFLATED if mode == "deflate" else zipfile.ZIP_STORED
        with zipfile.ZipFile(target, "w", compression=method) as z:
            for item in members:
                name, path = item.split("=", 1)
                with open(path, "rb") as src:
                    data = src.read()
                info = zipfile.ZipInfo(name)
                info.compress_type = method  # a ZipInfo does not take the archive's default
                with z.open(info, "w", force_zip64=(mode == "zip64")) as dst:
                    dst.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
