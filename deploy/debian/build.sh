#!/bin/bash
# Builds Ferry's Debian package (`make deb` runs this from the repository's root):
# a release `ferry` with the Swift runtime and Foundation linked in
# (--static-swift-stdlib), so it needs no toolchain on the server, Ferry's SQL, the
# systemd units and environment files of deploy/, and this folder's maintainer
# scripts. Depends: is what dpkg-shlibdeps finds the binary links, not a list kept by
# hand. Prints the package's path last.
#
# Built in a scratch folder of its own (.build/package), so that it runs while
# `swift test` holds .build (the package test calls `make deb`).
set -euo pipefail

repository=$(pwd)
scratch="$repository/.build/package"
stage="$scratch/stage"
output="$repository/.build/deb"

swift build -c release --static-swift-stdlib --disable-local-rpath --product ferry --scratch-path "$scratch"
binary="$scratch/release/ferry"

# The version `ferry version` prints on its first line: "ferry 0.1.0 (commit …)".
version=$("$binary" version | sed -n '1s/^ferry \([^ ]*\) .*/\1/p')
[ -n "$version" ] || { echo "deploy/debian/build.sh: no version in '$("$binary" version)'" >&2; exit 1; }
architecture=$(dpkg --print-architecture)

links=$(ldd "$binary")
if grep -q -e 'not found' -e '/opt/swift' -e 'swift/linux' <<<"$links"; then
    echo "deploy/debian/build.sh: the binary links what a server does not have:" >&2
    echo "$links" >&2
    exit 1
fi

rm -rf "$stage"
install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/usr/share/ferry/sql" "$stage/lib/systemd/system" \
    "$stage/etc/ferry" "$stage/usr/share/doc/ferry"
# Debug information out (a fifth of the size), symbols kept: a crash's backtrace names functions.
strip --strip-debug -o "$stage/usr/bin/ferry" "$binary"
cp -R sql/ferry "$stage/usr/share/ferry/sql/ferry"
chmod -R u=rwX,go=rX "$stage/usr/share/ferry"
install -m 0644 deploy/ferry.service deploy/ferry-migrate.service "$stage/lib/systemd/system/"
# The gateway's settings, and the owner's login that only the migrations get.
install -m 0640 deploy/ferry.env.example "$stage/etc/ferry/ferry.env"
install -m 0600 deploy/migrate.env.example "$stage/etc/ferry/migrate.env"
install -m 0644 README.md docs/DEPLOY.md docs/OPERATIONS.md "$stage/usr/share/doc/ferry/"
install -m 0755 deploy/debian/postinst "$stage/DEBIAN/postinst"
find "$stage/etc" -type f | sed "s|^$stage||" | sort >"$stage/DEBIAN/conffiles"

# dpkg-shlibdeps wants a source package's debian/control beside it; a minimal one does.
mkdir -p "$scratch/shlibdeps/debian"
printf 'Source: ferry\n\nPackage: ferry\nArchitecture: any\n' >"$scratch/shlibdeps/debian/control"
depends=$(cd "$scratch/shlibdeps" && dpkg-shlibdeps -O --warnings=0 -e"$stage/usr/bin/ferry" | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "deploy/debian/build.sh: dpkg-shlibdeps found no libraries" >&2; exit 1; }

sed -e "s|@VERSION@|$version|" -e "s|@ARCHITECTURE@|$architecture|" -e "s|@DEPENDS@|$depends|" \
    -e "s|@INSTALLED_SIZE@|$(du -sk --exclude=DEBIAN "$stage" | cut -f1)|" \
    deploy/debian/control.in >"$stage/DEBIAN/control"

mkdir -p "$output"
package="$output/ferry_${version}_${architecture}.deb"
# What went in, so that a run with nothing changed (the package test's, after make
# test's own) keeps the package instead of compressing it again.
inputs=$(cd "$stage" && find . \( -type f -o -type d \) -printf '%p %m\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum)
if [ -f "$package" ] && [ "$(cat "$package.inputs" 2>/dev/null)" = "$inputs" ]; then
    echo "$package"
    exit 0
fi
rm -f "$package.inputs"
# xz -1: 13 s and 19 MB on two cores, where the default -6 takes 51 s for 16 MB.
dpkg-deb --root-owner-group -Zxz -z1 --build "$stage" "$package" >/dev/null
printf '%s\n' "$inputs" >"$package.inputs"
echo "$package"
