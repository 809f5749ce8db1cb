"""A program for tests/test_forkserver.py to fork: reports where it runs, then exits with argv[0]."""

import json
import os
import sys


def main(argv: list[str]) -> int:
    fd = int(os.environ["CHILD_FD"])
    os.write(fd, json.dumps({"net": os.stat("/proc/self/ns/net").st_ino, "cwd": os.getcwd(), "argv": argv,
                             "sid": os.getsid(0) == os.getpid(), "env": os.environ.get("CHILD_TAG")}).encode())
    os.close(fd)
    print("child says hello", flush=True)
    return int(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
