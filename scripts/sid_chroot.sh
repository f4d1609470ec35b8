#!/usr/bin/env bash
# CPython 3.14 and 3.15 for CI on a machine that has neither: a Debian sid chroot with Debian's own
# python3.14 and python3.15 (their -dev, -venv and -dbg builds, and libpython3.1X-testsuite for
# CPython's asyncio tests), build-essential, clang (the C sources' warnings test), Node.js (the docs
# search test) and git. Sid's binaries need sid's C library, hence a whole chroot rather than the
# interpreters alone.
#
#   scripts/sid_chroot.sh run SRC COMMAND   run COMMAND (bash) in the chroot, in SRC mounted at /src
#   scripts/sid_chroot.sh path              make the chroot if needed, print where it is
#
# The chroot is made once (debootstrap --variant=minbase, then apt-get; Debian's archive only)
# and kept under the CI cache, ${SCOPED_BACKENDS_CI_CACHE:-~/.cache/scoped-backends-ci}/sid-KEY,
# where KEY hashes the package list, the mirror and the setup below: a change to any of them
# makes a new chroot and removes the old one. It is marked complete only after the whole setup,
# so an interrupted one is made again. Every mount (the setup's, /proc, /dev, /tmp, SRC) lives in a
# private mount namespace (unshare --mount) that ends with the command, whatever its exit status,
# so nothing stays mounted on the host. Needs root (debootstrap, chroot, mount), unshare and
# debootstrap. Exit status: the command's.
set -euo pipefail

MIRROR=http://deb.debian.org/debian
PACKAGES="build-essential clang nodejs git ca-certificates
python3.14 python3.14-dev python3.14-venv python3.14-dbg libpython3.14-testsuite
python3.15 python3.15-dev python3.15-venv python3.15-dbg libpython3.15-testsuite"
CACHE=${SCOPED_BACKENDS_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/scoped-backends-ci}

# inside ROOT SRC COMMAND: COMMAND in ROOT, with SRC (or nothing: "") at /src, in a clean
# environment (the host's CA bundle, which a TLS-intercepting proxy may need, for pip).
inside() {
    local root=$1 src=$2
    shift 2
    unshare --mount --propagation private -- bash -euc '
        root=$1 src=$2
        shift 2
        mount --rbind /dev "$root/dev"
        mount -t proc proc "$root/proc"
        mount -t tmpfs tmpfs "$root/tmp"
        mkdir -p "$root/src"
        if [ -n "$src" ]; then mount --bind "$src" "$root/src"; fi
        cp /etc/resolv.conf "$root/etc/resolv.conf"
        for bundle in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
            if [ -f "$bundle" ]; then mkdir -p "$root/etc/ssl"; cp "$bundle" "$root/etc/ssl/host-ca.crt"; break; fi
        done
        ca=/etc/ssl/host-ca.crt
        [ -f "$root$ca" ] || ca=/etc/ssl/certs/ca-certificates.crt
        exec chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
            DEBIAN_FRONTEND=noninteractive PIP_CERT=$ca SSL_CERT_FILE=$ca REQUESTS_CA_BUNDLE=$ca \
            PIP_DISABLE_PIP_VERSION_CHECK=1 bash -euc "cd /src; $1"
    ' _ "$root" "$src" "$@"
}

# setup ROOT: debootstrap, then the packages. Part of the cache key: a change remakes the chroot.
setup() {
    unshare --mount --propagation private -- debootstrap --variant=minbase sid "$1" "$MIRROR"
    # The mirror's sid index may be past its Valid-Until date.
    inside "$1" "" "apt-get -q -o Acquire::Check-Valid-Until=false update &&
        apt-get install -y -q --no-install-recommends $(echo $PACKAGES) && apt-get clean"
}

# remove DIR, never through a mount point (an interrupted setup's leftovers)
remove() {
    if awk -v dir="$1" 'index($5, dir "/") == 1 || $5 == dir { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        echo "sid_chroot: $1 has something mounted in it; not removing it" >&2
        return 1
    fi
    rm -rf --one-file-system "$1"
}

ensure() {
    [ "$(id -u)" = 0 ] || { echo "sid_chroot: needs root (debootstrap, chroot, mount)" >&2; return 1; }
    command -v debootstrap >/dev/null || { echo "sid_chroot: needs debootstrap (apt-get install debootstrap)" >&2; return 1; }
    local key
    key=$({ echo "$MIRROR"; echo $PACKAGES; declare -f setup inside; uname -m; } | sha256sum | cut -c1-16)
    ROOT=$CACHE/sid-$key
    mkdir -p "$CACHE"
    exec 8>"$CACHE/sid.lock"
    flock -w 1800 8 || { echo "sid_chroot: another run has held $CACHE/sid.lock for 30 minutes" >&2; return 1; }
    if [ ! -f "$ROOT/.complete" ]; then
        echo "sid_chroot: making $ROOT" >&2
        [ ! -e "$ROOT" ] || remove "$ROOT"
        setup "$ROOT"
        touch "$ROOT/.complete"
    fi
    # only this key's chroot is kept
    local old
    for old in "$CACHE"/sid-*; do
        if [ -d "$old" ] && [ "$old" != "$ROOT" ]; then remove "$old"; fi
    done
}

case ${1:-} in
    path)
        ensure
        echo "$ROOT"
        ;;
    run)
        [ $# -eq 3 ] || { echo "usage: $0 run SRC COMMAND" >&2; exit 2; }
        src=$(cd "$2" && pwd)
        ensure
        inside "$ROOT" "$src" "$3"
        ;;
    *)
        echo "usage: $0 run SRC COMMAND | $0 path" >&2
        exit 2
        ;;
esac
