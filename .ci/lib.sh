# shellcheck shell=bash
# Shared helpers for the .ci/ service scripts. Source it (after `set -euo pipefail`); it defines the CI_* paths below
# and functions, and creates the log folder. Every path is computed from this file's location, so the scripts work in
# any clone of the repository.

CI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CI_ROOT=$(cd "$CI_DIR/.." && pwd)
CI_SCRATCH=$CI_ROOT/.scratch
CI_LOGS=$CI_SCRATCH/logs
mkdir -p "$CI_LOGS"

# ci_us prints the wall clock in microseconds.
ci_us() { local t=$EPOCHREALTIME; printf '%s\n' "${t/./}"; }

# ci_since START_US prints the seconds elapsed since START_US with one decimal, e.g. "3.4s".
ci_since() {
	local d=$(($(ci_us) - $1))
	printf '%d.%ds' $((d / 1000000)) $((d % 1000000 / 100000))
}

# ci_note FILE MSG... appends a timestamped line to a setup log (the detail behind the one-line summaries).
ci_note() { local f=$1; shift; printf '[%(%F %T)T] %s\n' -1 "$*" >>"$f"; }

# ci_fail MSG [LOG]: prints MSG (and the last 40 lines of LOG when given) to stderr and exits 1.
ci_fail() {
	printf '%s\n' "$1" >&2
	if [[ -n ${2:-} && -f $2 ]]; then
		printf -- '--- last 40 lines of %s ---\n' "$2" >&2
		tail -n 40 "$2" >&2
	fi
	exit 1
}

# ci_lock FILE: takes an exclusive lock (fd 9) so two runs of the same script do not race; waits up to 10 minutes.
# Background services must be started with ci_start_bg, which closes fd 9 so the lock dies with this script.
ci_lock() {
	exec 9>"$1"
	flock -w 600 9 || ci_fail "could not lock $1 within 600 s (another run of ${0##*/} is stuck?)"
}

# ci_tcp_open HOST PORT: true when something accepts TCP connections there.
# shellcheck disable=SC2016 # $0 and $1 expand in the child shell
ci_tcp_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null; }

# ci_pid_alive PIDFILE MARKER: true when the pid in PIDFILE runs and its command line contains MARKER
# (guards against a recycled pid).
ci_pid_alive() {
	local pid
	[[ -s $1 ]] || return 1
	pid=$(<"$1")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# ci_start_bg PIDFILE LOG CMD...: starts CMD detached (own session, no stdin, stdout+stderr appended to LOG, lock fd
# closed) and writes its pid to PIDFILE. CMD keeps running after the calling script (and CI's step) ends.
ci_start_bg() {
	local pidfile=$1 log=$2
	shift 2
	rm -f "$pidfile"
	# shellcheck disable=SC2016 # $$ and $@ expand in the child shell
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" </dev/null >>"$log" 2>&1 9>&- &
	local _
	for _ in $(seq 50); do
		[[ -s $pidfile ]] && return 0
		sleep 0.02
	done
	ci_fail "could not start $1"
}

# ci_wait TIMEOUT_S WHAT CHECK...: runs CHECK every 0.2 s until it succeeds; returns 1 after TIMEOUT_S seconds.
# Set CI_WAIT_ALIVE to a pid to give up at once when that process dies.
ci_wait() {
	local timeout=$1 what=$2
	shift 2
	local deadline=$(($(ci_us) + timeout * 1000000))
	while ! "$@" >/dev/null 2>&1; do
		if [[ -n ${CI_WAIT_ALIVE:-} ]] && ! kill -0 "$CI_WAIT_ALIVE" 2>/dev/null; then
			printf '%s: the process (pid %s) exited while waiting\n' "$what" "$CI_WAIT_ALIVE" >&2
			return 1
		fi
		if (($(ci_us) > deadline)); then
			printf '%s: not ready after %d s\n' "$what" "$timeout" >&2
			return 1
		fi
		sleep 0.2
	done
}

# ci_write_if_changed FILE: writes stdin to FILE only when the content differs; returns 0 when it changed, 1 when not.
ci_write_if_changed() {
	local tmp
	tmp=$(mktemp "$1.XXXXXX")
	cat >"$tmp"
	if [[ -f $1 ]] && cmp -s "$tmp" "$1"; then
		rm -f "$tmp"
		return 1
	fi
	mv -f "$tmp" "$1"
}

# ci_kafka_apiversions HOST PORT: true when a Kafka broker answers an ApiVersions v0 request there with error code 0.
# Pure bash (no JVM), so it takes milliseconds; works on PLAINTEXT and SASL listeners (ApiVersions precedes SASL).
ci_kafka_apiversions() {
	local hex
	# request: size 16 | api_key 18 | api_version 0 | correlation_id 7 | client_id "cprobe"
	# response starts: size (4 bytes) | correlation_id 7 (4) | error_code 0 (2)
	# shellcheck disable=SC2016
	hex=$(timeout 3 bash -c '
		exec 3<>"/dev/tcp/$0/$1" || exit 1
		printf "\x00\x00\x00\x10\x00\x12\x00\x00\x00\x00\x00\x07\x00\x06cprobe" >&3
		head -c 10 <&3 | od -An -tx1 | tr -d " \n"' "$1" "$2" 2>/dev/null) || return 1
	[[ ${hex:8:12} == 000000070000 ]]
}

# ci_apt_install LOG PKG...: installs Debian packages (apt-get update, then install without recommends), appending
# apt's output to LOG. Another package run (unattended-upgrades, a second checkout's install) may hold the dpkg or the
# package-list lock: apt waits for it (DPkg::Lock::Timeout), and a run that still meets a held lock is retried, up to
# CI_APT_LOCK_WAIT seconds in all (default 600), saying so in LOG. Returns apt-get's status.
ci_apt_install() {
	local log=$1
	shift
	local deadline=$(($(ci_us) + ${CI_APT_LOCK_WAIT:-600} * 1000000)) rc
	local apt=(apt-get -q -o DPkg::Lock::Timeout=60)
	while true; do
		rc=0
		{
			"${apt[@]}" update || echo "apt-get update failed; installing from the current package lists"
			DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y --no-install-recommends "$@"
		} >>"$log" 2>&1 9>&- || rc=$?
		((rc == 0)) && return 0
		if tail -n 20 "$log" | grep -qE 'Could not get lock|Unable to acquire the dpkg|is held by process' &&
			(($(ci_us) < deadline)); then
			ci_note "$log" "another package run holds the dpkg lock; trying again in 5 s"
			sleep 5
			continue
		fi
		return "$rc"
	done
}

# ci_checkout_image: the image tag of this checkout's own build (changesink:ci-<12 hex of its path>); .ci/env
# computes the same name for CHANGESINK_TEST_IMAGE.
ci_checkout_image() { printf 'changesink:ci-%s\n' "$(printf %s "$CI_ROOT" | sha256sum | cut -c1-12)"; }

# ci_use_clickhouse SERVER: points the tests' ClickHouse variables (.ci/env) at SERVER, in this shell: 18.16 (Debian's,
# .ci/clickhouse: as .ci/env sets them), 26.9 (chdb-core's, .ci/clickhouse-current, native protocol) or 26.9-http
# (the same over HTTP). For 26.9 it names the server (CHANGESINK_TEST_CLICKHOUSE_SERVER), lists what it lacks
# (CHANGESINK_TEST_CLICKHOUSE_LACKS: testenv.ClickHouseHas) and unsets the variables of 18.16's TLS port and user.
# Used by .ci/test and .ci/bench-cdc; exits 2 on an unknown SERVER.
ci_use_clickhouse() {
	case $1 in
	18.16) ;;
	26.9 | 26.9-http)
		export CHANGESINK_TEST_CLICKHOUSE=$CHANGESINK_TEST_CLICKHOUSE_CURRENT
		export CHANGESINK_TEST_CLICKHOUSE_SERVER="ClickHouse 26.9 (chdb-core stand-in, .ci/clickhouse-current), native"
		if [[ $1 == 26.9-http ]]; then
			export CHANGESINK_TEST_CLICKHOUSE=$CHANGESINK_TEST_CLICKHOUSE_CURRENT_HTTP
			CHANGESINK_TEST_CLICKHOUSE_SERVER=${CHANGESINK_TEST_CLICKHOUSE_SERVER%, native}", HTTP"
		fi
		export CHANGESINK_TEST_CLICKHOUSE_CLIENT=$CHANGESINK_TEST_CLICKHOUSE_CURRENT_CLIENT
		local http=${CHANGESINK_TEST_CLICKHOUSE_CURRENT_HTTP#http://}
		export CHANGESINK_TEST_CLICKHOUSE_HTTP=${http%%/*}
		export CHANGESINK_TEST_CLICKHOUSE_LACKS="tls users cluster"
		unset CHANGESINK_TEST_CLICKHOUSE_SECURE CHANGESINK_TEST_CLICKHOUSE_USER CHANGESINK_TEST_CLICKHOUSE_PASSWORD
		;;
	*)
		echo "unknown ClickHouse server $1 (known: 18.16, 26.9, 26.9-http)" >&2
		exit 2
		;;
	esac
}

# CI_PER_SERVER is the directive that marks a test whose outcome depends on the ClickHouse server or protocol: a line
# of its own directly above `func TestX(`, the last line of its doc comment. .ci/test runs the tests so marked on
# every server of the matrix, and every test on 18.16 (docs/testing.md, "Per server").
CI_PER_SERVER='//changesink:per-server'

# ci_per_server_tests: prints the marked tests of the checkout, one "<package dir><TAB><TestName>" a line (the
# directory as ./path), sorted. Returns 1, naming file and line on stderr, when a marker is not directly above a
# `func TestX(t *testing.T)` of a _test.go file (any other place, indented, a TestMain, a Benchmark), or when a marked
# name is also the name of an unmarked test in another package that holds markers (one `go test -run` over those
# packages would run that one too).
ci_per_server_tests() {
	local files out
	if git -C "$CI_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		files=$(cd "$CI_ROOT" && git ls-files -co --exclude-standard -- '*.go' ':!:**/testdata/**')
	else
		files=$(cd "$CI_ROOT" && find . -name '*.go' -not -path '*/testdata/*' -not -path './.*' | sed 's|^\./||')
	fi
	[[ -n $files ]] || return 0
	# shellcheck disable=SC2086 # one path per word; repository paths have no spaces
	out=$(cd "$CI_ROOT" && awk -v tag="$CI_PER_SERVER" '
		function dir(f) { return f ~ /\// ? "./" substr(f, 1, match(f, /\/[^\/]*$/) - 1) : "." }
		FNR == 1 { pending = 0 }
		pending {
			pending = 0
			if (FILENAME ~ /_test\.go$/ && match($0, /^func Test[A-Za-z0-9_]*\(/) && $0 !~ /^func TestMain\(/) {
				name = substr($0, 6, RLENGTH - 6) # before dir(), whose match() sets RLENGTH
				print "T\t" dir(FILENAME) "\t" name
			} else {
				print "E\t" FILENAME ":" FNR - 1 ": " tag " is not directly above a func TestX(t *testing.T) of a _test.go file"
			}
		}
		index($0, tag) {
			if ($0 == tag) { pending = 1 } else if ($0 ~ ("^[ \t]*" tag)) {
				print "E\t" FILENAME ":" FNR ": " tag " must be a line of its own at the start of the line, above func TestX("
			}
		}
		FILENAME ~ /_test\.go$/ && match($0, /^func Test[A-Za-z0-9_]*\(/) && $0 !~ /^func TestMain\(/ {
			name = substr($0, 6, RLENGTH - 6) # before dir(), whose match() sets RLENGTH
			print "A\t" dir(FILENAME) "\t" name
		}' $files) || return 1
	awk -F'\t' '
		$1 == "E" { print $2 > "/dev/stderr"; bad = 1; next }
		$1 == "T" { marked[$2 "\t" $3] = 1; pkgs[$2] = 1; names[$3] = 1; next }
		$1 == "A" { all[$2 "\t" $3] = 1 }
		END {
			for (k in all) {
				split(k, p, "\t")
				if ((p[1] in pkgs) && (p[2] in names) && !(k in marked)) {
					print "test " p[2] " of " p[1] " is not marked, but a test of that name is marked in another package: " \
						"one go test -run over both would run it too (mark it as well, or rename one)" > "/dev/stderr"
					bad = 1
				}
			}
			for (k in marked) print k | "sort"
			close("sort")
			exit bad
		}' <<<"$out"
}

# ci_go_tests: prints every test function of the checkout, one "<package dir><TAB><TestName>" a line (the directory
# as ./path; TestMain left out), from the _test.go files (testdata left out).
ci_go_tests() {
	local files
	if git -C "$CI_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		files=$(cd "$CI_ROOT" && git ls-files -co --exclude-standard -- '*_test.go' ':!:**/testdata/**')
	else
		files=$(cd "$CI_ROOT" && find . -name '*_test.go' -not -path '*/testdata/*' -not -path './.*' | sed 's|^\./||')
	fi
	[[ -n $files ]] || return 0
	# shellcheck disable=SC2086 # one path per word; repository paths have no spaces
	(cd "$CI_ROOT" && awk '
		match($0, /^func Test[A-Za-z0-9_]*\(/) && $0 !~ /^func TestMain\(/ {
			name = substr($0, 6, RLENGTH - 6)
			d = FILENAME ~ /\// ? "./" substr(FILENAME, 1, match(FILENAME, /\/[^\/]*$/) - 1) : "."
			print d "\t" name
		}' $files | sort)
}

# ci_debezium_bench builds harness/debezium-bench (the benchmarks' Debezium, embedded engine) with the Temurin 25 JDK
# and sets DBZ_JAVA (that JDK's java) and DBZ_CP (the harness's classpath); it fails with the build log's tail.
ci_debezium_bench() {
	local jdk=${CHANGESINK_JAVA25_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64} module=$CI_ROOT/harness/debezium-bench
	[[ -x $jdk/bin/java ]] || ci_fail "no Java 25 JDK at $jdk (set CHANGESINK_JAVA25_HOME)"
	command -v mvn >/dev/null || ci_fail "mvn not found (Debian package maven)"
	echo "building harness/debezium-bench (log: $CI_LOGS/debezium-bench.log)"
	JAVA_HOME=$jdk mvn -B -q -Dstyle.color=never -f "$module/pom.xml" compile dependency:build-classpath \
		"-Dmdep.outputFile=$module/target/classpath.txt" >"$CI_LOGS/debezium-bench.log" 2>&1 ||
		ci_fail "harness/debezium-bench did not build" "$CI_LOGS/debezium-bench.log"
	# shellcheck disable=SC2034 # read by the script that calls it
	DBZ_JAVA=$jdk/bin/java
	# shellcheck disable=SC2034
	DBZ_CP="$module/target/classes:$(<"$module/target/classpath.txt")"
}
