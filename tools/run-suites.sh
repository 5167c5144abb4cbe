#!/usr/bin/env bash
# Run test binaries of the `tests` package side by side: `tools/run-suites.sh NAME...`.
#
# The e2e suites spend most of their time waiting on processes (etcd elections, a 5-minute
# unschedulable grace, schedules firing), not on CPU. Each test binary starts its own control plane
# and claims its own pod-runner slot (bridge, subnet, /etc/hosts block; see
# tests/src/podrunner/network.rs), and names its namespaces uniquely, so binaries can share the host.
#
# NAMEs are started in the order given, at most $SUITE_JOBS (default 3) at a time, the next one as
# soon as a lane frees: list the longest first and the lanes even out. Within a binary, libtest runs
# $SUITE_TEST_THREADS tests at once (default 3; RUST_TEST_THREADS, when set, wins): libtest's own
# default is the core count, 2 here, which left the third test of a 3-test suite waiting on tests
# that themselves only wait. Each binary's output goes to
# its own log (under $CARGO_TARGET_DIR/suite-logs/) and is printed whole when it ends, so the output
# of two suites never interleaves. Exit status: 0 only when every binary passed; the failing ones
# are named at the end with the tail of their output.

# The whole script is one brace group, which bash reads in full before running any of it: editing
# or checking out this file while a run is under way (it lasts many minutes) cannot change or
# break that run.
{
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${SUITE_JOBS:-3}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "SUITE_JOBS=$jobs: expected a positive integer" >&2; exit 2; }
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-${SUITE_TEST_THREADS:-3}}
[[ $RUST_TEST_THREADS =~ ^[1-9][0-9]*$ ]] ||
  { echo "RUST_TEST_THREADS=$RUST_TEST_THREADS: expected a positive integer" >&2; exit 2; }
(( $# > 0 )) || { echo "usage: $0 TEST_NAME..." >&2; exit 2; }

target_dir=${CARGO_TARGET_DIR:-$PWD/target}
log_dir=$target_dir/suite-logs/run-$$
mkdir -p "$log_dir"
# Only the newest few runs' logs are kept.
(cd "$target_dir/suite-logs" && ls -dt run-* 2>/dev/null | tail -n +4 | xargs -r rm -rf)

# Build every binary first (one cargo invocation, its build lock released before anything runs),
# and learn each one's executable from cargo's own report rather than guessing the hash.
# The whole workspace is selected, as by `make build`: the same features, so nothing is compiled again.
test_args=()
for name in "$@"; do test_args+=(--test "$name"); done
cargo test --locked --workspace --no-run --message-format=json-render-diagnostics "${test_args[@]}" \
  >"$log_dir/build.json"
declare -A exe
while IFS=$'\t' read -r name path; do
  exe[$name]=$path
done < <(jq -r 'select(.reason == "compiler-artifact" and .executable != null
                      and (.target.kind | index("test")))
                | [.target.name, .executable] | @tsv' "$log_dir/build.json")
for name in "$@"; do
  [[ -n ${exe[$name]:-} ]] || { echo "no test executable for '$name' in cargo's build report" >&2; exit 2; }
done

declare -A pid_of started
running=()
failed=()
summary=()

finish() {
  local name=$1 rc=$2 took=$(( $(date +%s) - ${started[$1]} ))
  echo "==================== $name (exit $rc, ${took}s) ===================="
  cat "$log_dir/$name.log"
  if (( rc == 0 )); then
    summary+=("ok     ${took}s  $name")
  else
    summary+=("FAILED ${took}s  $name")
    failed+=("$name")
  fi
}

# Wait for one running binary to end and report it.
reap() {
  local pids=() name done_pid='' rc=0 still=()
  for name in "${running[@]}"; do pids+=("${pid_of[$name]}"); done
  wait -n -p done_pid "${pids[@]}" || rc=$?
  for name in "${running[@]}"; do
    if [[ ${pid_of[$name]} == "$done_pid" ]]; then finish "$name" "$rc"; else still+=("$name"); fi
  done
  running=("${still[@]}")
}

stop_all() {
  local name
  for name in "${running[@]}"; do kill -TERM "${pid_of[$name]}" 2>/dev/null || true; done
}
trap 'stop_all; exit 130' INT TERM

begin=$(date +%s)
for name in "$@"; do
  while (( ${#running[@]} >= jobs )); do reap; done
  echo "[suites] start $name ($(( ${#running[@]} + 1 ))/$jobs lanes busy)"
  started[$name]=$(date +%s)
  # cargo runs a test binary from its package's directory; so do we.
  (cd tests && exec "${exe[$name]}") >"$log_dir/$name.log" 2>&1 &
  pid_of[$name]=$!
  running+=("$name")
done
while (( ${#running[@]} > 0 )); do reap; done

echo "==================== suites: $(( $(date +%s) - begin ))s wall, $jobs lanes, $RUST_TEST_THREADS tests at once per binary ===================="
printf '%s\n' "${summary[@]}"
if (( ${#failed[@]} > 0 )); then
  for name in "${failed[@]}"; do
    echo "---- $name failed; its last lines (whole log: $log_dir/$name.log) ----"
    tail -n 60 "$log_dir/$name.log"
  done
  exit 1
fi
exit 0
}
