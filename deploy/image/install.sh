#!/bin/sh
# Makes a Debian bookworm root filesystem into noop's image. Runs inside it, as root,
# from deploy/build-image (offline) and deploy/Dockerfile (with the network):
#   install.sh packages      the packages listed in deploy/image/packages, unless all are in
#   install.sh headers SRC   Debian's kernel headers, merged by noop's own code (SRC: a noop
#                            source tree) into /usr/share/noop/kernel-headers/debian
#   install.sh noop SRC      noop into the venv /opt/noop: from the wheels in
#                            SRC/deploy/image/wheels when there (offline), else from SRC
#   install.sh all SRC       each of the three that is not done yet
# The kernel headers come without their packages' dependency on gcc: the image has no
# compiler but the one inside BCC's own library.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export DEBIAN_FRONTEND=noninteractive
headers=/usr/share/noop/kernel-headers

listed() { sed -e 's/#.*//' "$here/packages" | tr -s ' \t' '\n\n' | grep .; }

have_packages() {
	for p in $(listed); do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "ok installed" || return 1
	done
}

packages() {
	have_packages && return 0
	apt-get update -qq
	# shellcheck disable=SC2046
	apt-get install -y -qq --no-install-recommends $(listed) >/dev/null
	apt-get clean
	rm -rf /var/lib/apt/lists/*
}

kernel_headers() {  # SRC
	[ -e "$headers/debian/include" ] && return 0
	lists_were_there=$(ls /var/lib/apt/lists 2>/dev/null | grep -c _Packages || true)
	[ "$lists_were_there" -gt 0 ] || apt-get update -qq
	# linux-headers-amd64 names this release's pair: -VERSION-amd64 and -VERSION-common.
	flavour=$(apt-cache depends linux-headers-amd64 | sed -n 's/^ *Depends: \(linux-headers-.*-amd64\)$/\1/p' | head -n 1)
	[ -n "$flavour" ] || { echo "install.sh: no linux-headers-amd64 in the apt lists" >&2; exit 1; }
	common=${flavour%-amd64}-common
	work=$(mktemp -d)
	(cd "$work" && apt-get -qq -o APT::Sandbox::User=root download "$flavour" "$common")
	for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
	PYTHONPATH=$1 python3 -c 'import sys; from pathlib import Path
from agent.kernel.kheaders import prepare_headers
print(prepare_headers(Path(sys.argv[1]), usr_src=Path(sys.argv[2])))' \
		/usr/share/noop "$work/root/usr/src" >/dev/null
	ln -sfn "${flavour#linux-headers-}" "$headers/debian"
	rm -rf "$work"
	[ "$lists_were_there" -gt 0 ] || rm -rf /var/lib/apt/lists/*
}

noop() {  # SRC
	[ -x /opt/noop/bin/noop ] && return 0
	python3 -m venv --system-site-packages /opt/noop
	if [ -d "$1/deploy/image/wheels" ]; then
		/opt/noop/bin/pip install -q --no-cache-dir --no-index \
			--find-links "$1/deploy/image/wheels" noop
	else
		/opt/noop/bin/pip install -q --no-cache-dir "$1"
	fi
	/opt/noop/bin/pip uninstall -q -y pip  # nothing installs into the image at run time
	/opt/noop/bin/noop --version
}

case "${1:-}" in
packages) packages ;;
headers) kernel_headers "$2" ;;
noop) noop "$2" ;;
all) packages && kernel_headers "$2" && noop "$2" ;;
*) echo "usage: install.sh packages | headers SRC | noop SRC | all SRC" >&2; exit 2 ;;
esac
