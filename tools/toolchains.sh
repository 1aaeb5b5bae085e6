#!/usr/bin/env bash
# The compilers the tests check generated GPU code with, beyond gcc and nvcc:
# hipcc, AMD's HIP compiler (the Debian package hipcc). Installed when missing
# and this runs as root with apt-get; otherwise the hipcc checks are skipped,
# and pytest's summary says so. Always exits 0.
set -u
if command -v hipcc >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "toolchains: installing hipcc (apt-get install hipcc)"
    if apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hipcc >/dev/null 2>&1; then
        echo "toolchains: hipcc installed"
        exit 0
    fi
fi
echo "toolchains: hipcc is not installed (as root: apt-get install hipcc); the hipcc checks will be skipped"
exit 0
