# Helpers every bench/*.sh script sources (after `cd` to the repository root); not a
# benchmark itself, so bench/run (which runs every *.sh) leaves it alone.

# A free TCP port on loopback.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits (10 s at most) until `url` answers 2xx; says which one did not and fails.
wait_until_answers() {
    for _ in $(seq 100); do
        curl -fs -o /dev/null "$1" && return 0
        sleep 0.1
    done
    echo "nothing answers at $1" >&2
    return 1
}

# The median of the numbers on standard input, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# CPU time in clock ticks (getconf CLK_TCK a second): of process $1 with its reaped
# children (fields 14-17 of /proc/<pid>/stat), 0 once it is gone.
process_ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# Of the PostgreSQL cluster whose postmaster is $1: the postmaster with the backends it
# reaped, plus its live children.
cluster_ticks() {
    local total child
    total=$(process_ticks "$1")
    for child in $(pgrep -P "$1"); do total=$((total + $(process_ticks "$child"))); done
    echo "$total"
}
