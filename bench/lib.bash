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
