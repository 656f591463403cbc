#!/bin/sh
# The fuzz corpora are committed packed, one archive per target:
# tests/fuzz/corpus/<target>.tar.gz, a flat tar of the inputs (named by their
# content, as libFuzzer names them) compressed with gzip, which every Debian
# has (xz-utils is not on a minimal install).  Packing is deterministic (names
# sorted, times, owners and modes fixed, no gzip name or time), so an archive
# changes only when its inputs do.  The replay tests (replay.c, `make test`)
# read the archives as they are, without unpacking them.
#
#   corpus.sh unpack ARCHIVE DIR     extract the inputs into DIR (created if missing)
#   corpus.sh pack DIR ARCHIVE       write ARCHIVE from the files of DIR (names not starting with '.')
#   corpus.sh add ARCHIVE FILE...    add the files (e.g. fixed crashers) to ARCHIVE
#   corpus.sh count ARCHIVE          print how many inputs ARCHIVE holds
set -eu

die() { echo "corpus.sh: $*" >&2; exit 1; }

count_files() { find "$1" -maxdepth 1 -type f ! -name '.*' | wc -l | tr -d ' '; }

unpack() {
    [ -f "$1" ] || die "no archive $1"
    mkdir -p "$2"
    gzip -dc "$1" | tar -xf - -C "$2"
}

pack() {
    dir=$1 archive=$2
    [ -d "$dir" ] || die "no directory $dir"
    [ "$(count_files "$dir")" -gt 0 ] || die "no inputs in $dir"
    tmp="$archive.tmp.$$"
    (cd "$dir" && find . -maxdepth 1 -type f ! -name '.*' | sed 's|^\./||' | LC_ALL=C sort) |
        tar -C "$dir" --format=ustar --no-recursion --owner=0 --group=0 --numeric-owner --mode=0644 \
            --mtime=@0 -cf - -T - | gzip -9 -n > "$tmp"
    mv "$tmp" "$archive"
}

with_tmpdir() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-corpus.XXXXXX")
    trap 'rm -rf "$work"' EXIT INT TERM
}

case "${1:-}" in
unpack)
    [ $# -eq 3 ] || die "usage: corpus.sh unpack ARCHIVE DIR"
    unpack "$2" "$3"
    ;;
pack)
    [ $# -eq 3 ] || die "usage: corpus.sh pack DIR ARCHIVE"
    pack "$2" "$3"
    echo "$3: $(count_files "$2") inputs"
    ;;
add)
    [ $# -ge 3 ] || die "usage: corpus.sh add ARCHIVE FILE..."
    archive=$2
    shift 2
    with_tmpdir
    mkdir "$work/in"
    [ ! -f "$archive" ] || unpack "$archive" "$work/in"
    cp -- "$@" "$work/in/"
    pack "$work/in" "$archive"
    echo "$archive: $(count_files "$work/in") inputs"
    ;;
count)
    [ $# -eq 2 ] || die "usage: corpus.sh count ARCHIVE"
    gzip -dc "$2" | tar -tf - | grep -vc '/$'
    ;;
*)
    sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
