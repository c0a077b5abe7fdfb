# Steps run at once, each one's output printed whole when it ends with its duration: sourced by .ci/run and
# scripts/gate. Also the steps themselves, so that CI and the gate check the same things the same way.
#
#   start NAME COMMAND...   run COMMAND in the background, its output kept for NAME
#   finish NAME...          wait for each, print its output and duration; failed ones go in $failed
#   checks                  lint, format, types, the layers' contract, the generated files, the docs site
#   unit_tier X.Y [WORKERS] the unit tier on Python X.Y, a third of the random examples

steps_logs="$(mktemp -d)"
steps_started_at="$(date +%s.%N)"
declare -A step_pid=()
failed=()

seconds_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }'; }

start() {
    local name="$1"
    shift
    (
        begun="$(date +%s.%N)"
        set +e
        # errexit holds inside the step (it would not in a `||` list): its first failing command ends it.
        (
            set -e
            "$@"
        ) >"$steps_logs/$name" 2>&1
        echo "$? $(seconds_since "$begun")" >"$steps_logs/$name.done"
    ) &
    step_pid[$name]=$!
}

finish() {
    local name status took
    for name in "$@"; do
        wait "${step_pid[$name]}" || true
        read -r status took <"$steps_logs/$name.done"
        echo "::: $name"
        cat "$steps_logs/$name"
        if [ "$status" = 0 ]; then
            echo "::: $name passed in ${took} s (at $(seconds_since "$steps_started_at") s)"
        else
            echo "::: $name FAILED (exit ${status}) in ${took} s (at $(seconds_since "$steps_started_at") s)"
            failed+=("$name")
        fi
    done
}

checks() {
    .venv/bin/ruff check .
    .venv/bin/ruff format --check .
    .venv/bin/mypy
    # The layers import only those below them (pyproject.toml's contract, TYPE_CHECKING imports included).
    .venv/bin/lint-imports --no-cache
    # The generated files (dashboard JSON, Prometheus rules, the docs' reference pages) are what the
    # generators build, and the docs site builds without a warning.
    .venv/bin/python -m dashboards.generate --check
    .venv/bin/python -m docs.generate --check
    NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
}

unit_tier() {
    local venv workers="${2:-2}"
    if [ "$1" = 3.11 ]; then venv=.venv; else venv="$(bash scripts/setup-python "$1")"; fi
    # WORKERS processes (default two: a third of the tier's time is waiting, on threads, sockets and the
    # processes a few tests start; 0: the tests in this process, when other steps fill the cores meanwhile).
    # A third of the random examples (tests/support.py: examples): here the interpreter is under test; the
    # README's command proves each property at its full count.
    "$venv/bin/python" -m pytest -q -m unit -p no:cacheprovider -n "$workers" --hypothesis-profile interpreters
}
