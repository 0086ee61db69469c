#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for the tests marked `slurm` (and for trying
# `oodeval study run --executor slurm` by hand).
#
#   bash scripts/slurm_cluster.sh start    # install if needed, start, wait until the node is idle
#   bash scripts/slurm_cluster.sh status   # exit 0 when the cluster answers and the node is up
#   bash scripts/slurm_cluster.sh env      # print `export SLURM_CONF=...` for sbatch, sinfo...
#   bash scripts/slurm_cluster.sh stop     # cancel its jobs, stop its daemons, delete its folder
#
# OODEVAL_SLURM_NO_INSTALL=1 makes `start` fail instead of installing missing packages.
#
# Debian's packages (slurm-wlm, slurmdbd, munge, mariadb-server) are installed when missing (root
# only). What the cluster writes lives in $OODEVAL_SLURM_DIR (default /tmp/oodeval-slurm): its
# slurm.conf and slurmdbd.conf, a MariaDB database for job accounting, state, spool, pid files
# and logs. Slurm's commands find this cluster through SLURM_CONF
# (`eval "$(bash scripts/slurm_cluster.sh env)"`). Outside that folder only munge is touched:
# Slurm reaches munged at its standard socket, so an munged already running there is used, and
# otherwise one is started (with /etc/munge/munge.key, created when missing).
#
# Daemons: munged (as the munge user), mariadbd on 127.0.0.1, slurmdbd, slurmctld and slurmd (as
# root). Accounting (slurmdbd) is there because submitit learns that a job ended without a result
# (cancelled, out of time) from `sacct`. No cgroups: processes are tracked by proctrack/linuxproc.
# `start` exits non-zero with the reason and the end of the failing daemon's log when the
# cluster cannot come up; it is a no-op when the cluster already runs.
set -euo pipefail

ROOT="${OODEVAL_SLURM_DIR:-/tmp/oodeval-slurm}"
CLUSTER=oodeval
DB_PORT="${OODEVAL_SLURM_DB_PORT:-6820}"
CTLD_PORT="${OODEVAL_SLURM_CTLD_PORT:-6817}"
SLURMD_PORT="${OODEVAL_SLURM_SLURMD_PORT:-6818}"
DBD_PORT="${OODEVAL_SLURM_DBD_PORT:-6819}"
TIMEOUT="${OODEVAL_SLURM_TIMEOUT:-90}"
export SLURM_CONF="$ROOT/etc/slurm.conf"
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)

say() { echo "slurm_cluster: $*" >&2; }
die() { say "error: $*"; exit 1; }

alive() {  # alive NAME: the daemon whose pid file is $ROOT/run/NAME.pid runs
    local pid
    pid="$(cat "$ROOT/run/$1.pid" 2>/dev/null)" || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

log_tail() {  # the end of a daemon's log, for error messages
    [ -f "$ROOT/log/$1.log" ] && tail -n "${2:-15}" "$ROOT/log/$1.log" | sed "s/^/  $1.log: /" >&2
    return 0
}

last_error() {  # the last error or fatal line of a daemon's log, and where the log is
    local line
    line="$(grep -h -i -E "error|fatal" "$ROOT/log/$1".{log,out} 2>/dev/null | tail -n 1)"
    echo "${line:-no error logged} (log: $ROOT/log/$1.log)"
}

wait_for() {  # wait_for SECONDS DESCRIPTION DAEMON COMMAND...: poll COMMAND until it succeeds
    local seconds="$1" what="$2" daemon="$3"
    shift 3
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if [ -n "$daemon" ] && ! alive "$daemon"; then
            log_tail "$daemon"
            die "$daemon exited while waiting for $what: $(last_error "$daemon")"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            [ -n "$daemon" ] && log_tail "$daemon"
            die "timed out after ${seconds}s waiting for $what"
        fi
        sleep 0.5
    done
}

install_packages() {
    local missing=()
    command -v sbatch >/dev/null && command -v slurmctld >/dev/null \
        && command -v slurmd >/dev/null || missing+=(slurm-wlm)
    command -v slurmdbd >/dev/null || missing+=(slurmdbd)
    command -v munged >/dev/null || missing+=(munge)
    command -v mariadbd >/dev/null || missing+=(mariadb-server)
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ -n "${OODEVAL_SLURM_NO_INSTALL:-}" ]; then
        die "not installed: ${missing[*]} (as root, scripts/slurm_cluster.sh start installs them)"
    fi
    [ "$(id -u)" = 0 ] || die "needs root to install ${missing[*]} (apt-get) and run the daemons"
    command -v apt-get >/dev/null || die "no apt-get: install ${PACKAGES[*]} by hand"
    say "installing ${missing[*]} (apt-get)"
    apt-get update -qq >"$ROOT/apt.log" 2>&1 \
        || { tail -n 20 "$ROOT/apt.log" >&2; die "apt-get update failed"; }
    # invoke-rc.d is refused on a machine without an init system; the packages' own services are
    # not used anyway (this script starts its own daemons)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        >"$ROOT/apt.log" 2>&1 || { tail -n 20 "$ROOT/apt.log" >&2; die "apt-get install failed"; }
}

node_line() {  # this machine as slurmd sees it: NodeName=... CPUs=... RealMemory=...
    local line
    line="$(slurmd -C | head -n 1)" || die "slurmd -C failed"
    case "$line" in NodeName=*) ;; *) die "unexpected slurmd -C output: $line" ;; esac
    echo "$line"
}

write_config() {
    local host node user
    host="$(hostname -s)"
    node="$(node_line)"
    user="$(id -un)"
    mkdir -p "$ROOT"/{etc,run,log,state/ctld,state/d,db,munge}
    cat >"$ROOT/etc/slurm.conf" <<EOF
# written by scripts/slurm_cluster.sh: a one-node cluster for oodeval's tests
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$ROOT/state/ctld
SlurmdSpoolDir=$ROOT/state/d/%n
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
JobCompType=jobcomp/none
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$ROOT/etc/slurmdbd.conf" <<EOF
# written by scripts/slurm_cluster.sh
AuthType=auth/munge
DbdHost=$host
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=$user
PidFile=$ROOT/run/slurmdbd.pid
LogFile=$ROOT/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=root
StorageLoc=oodeval_slurm_acct
EOF
    chmod 600 "$ROOT/etc/slurmdbd.conf"
}

munge_answers() {
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

start_munge() {
    # Slurm's clients reach munged at its standard socket (/run/munge/munge.socket.2): an
    # munged already answering there (this machine's own) is used as it is
    munge_answers && return 0
    alive munged && die "munged runs but does not answer (log: $ROOT/log/munged.log)"
    if [ ! -s /etc/munge/munge.key ]; then
        say "creating a munge key (/etc/munge/munge.key)"
        mkdir -p /etc/munge
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    fi
    mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
    chown munge:munge "$ROOT/munge"
    runuser -u munge -- munged --pid-file="$ROOT/munge/munged.pid" \
        --log-file="$ROOT/munge/munged.log" --seed-file="$ROOT/munge/munged.seed" \
        || { tail -n 5 "$ROOT/munge/munged.log" >&2 2>/dev/null; die "munged did not start"; }
    ln -sf "$ROOT/munge/munged.pid" "$ROOT/run/munged.pid"
    ln -sf "$ROOT/munge/munged.log" "$ROOT/log/munged.log"
    wait_for 20 "munge to answer" munged munge_answers
}

start_mariadb() {
    alive mariadbd && return 0
    if [ ! -d "$ROOT/db/mysql" ]; then
        mariadb-install-db --no-defaults --datadir="$ROOT/db" --user=root \
            --auth-root-authentication-method=normal --skip-test-db \
            >"$ROOT/log/mariadb-install.log" 2>&1 \
            || { tail -n 20 "$ROOT/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
    fi
    # no grant tables: a throw-away database reachable on the loopback interface only
    launch mariadbd --no-defaults --datadir="$ROOT/db" --user=root --bind-address=127.0.0.1 \
        --port="$DB_PORT" --socket="$ROOT/run/mariadb.sock" --pid-file="$ROOT/run/mariadbd.pid" \
        --log-error="$ROOT/log/mariadbd.log" --skip-grant-tables --skip-name-resolve \
        --innodb-use-native-aio=0 --innodb-buffer-pool-size=32M --performance-schema=OFF
    wait_for 60 "MariaDB on 127.0.0.1:$DB_PORT" mariadbd \
        mariadb-admin --no-defaults --socket="$ROOT/run/mariadb.sock" ping
}

launch() {  # launch DAEMON ARGS...: DAEMON in the foreground of a session of its own
    setsid "$@" </dev/null >>"$ROOT/log/$1.out" 2>&1 &
    echo $! >"$ROOT/run/$1.pid"
    disown
}

start_slurm_daemons() {
    if ! alive slurmdbd; then
        launch slurmdbd -D
        wait_for 60 "slurmdbd to answer" slurmdbd sacctmgr -n list cluster
    fi
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
        sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null
    fi
    if ! alive slurmctld; then
        launch slurmctld -D
        wait_for 60 "slurmctld to answer" slurmctld scontrol ping
    fi
    alive slurmd || launch slurmd -D
}

node_idle() {
    local state
    state="$(sinfo -h -N -o '%t' 2>/dev/null | head -n 1)"
    case "$state" in idle | mix | alloc) return 0 ;; *) return 1 ;; esac
}

cmd_status() {
    local daemon
    munge_answers || { say "munge does not answer"; return 1; }
    for daemon in mariadbd slurmdbd slurmctld slurmd; do
        alive "$daemon" || { say "$daemon is not running"; return 1; }
    done
    node_idle || { say "the node is not up: $(sinfo -h -N -o '%N %t %E' 2>&1)"; return 1; }
    sinfo -N -o '%N %P %t %c %m' >&2
}

cmd_start() {
    if cmd_status 2>/dev/null; then
        say "already running ($SLURM_CONF)"
        echo "export SLURM_CONF=$SLURM_CONF"
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "needs root (the daemons run as root; munged as the munge user)"
    mkdir -p "$ROOT"
    install_packages
    # a start that fails stops the daemons it started; their logs stay in $ROOT/log
    trap '[ $? -eq 0 ] || stop_daemons' EXIT
    local started=$SECONDS
    [ -f "$SLURM_CONF" ] || write_config
    start_munge
    start_mariadb
    start_slurm_daemons
    # a node left DOWN by an earlier run comes back; a fresh one registers as idle by itself
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    local deadline=$((SECONDS + TIMEOUT))
    until node_idle; do
        if ! alive slurmd; then log_tail slurmd; die "slurmd exited: $(last_error slurmd)"; fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            say "sinfo: $(sinfo -h -N -o '%N %t %E' 2>&1)"
            log_tail slurmctld
            log_tail slurmd
            die "the node did not become idle within ${TIMEOUT}s"
        fi
        sleep 0.5
    done
    say "cluster up in $((SECONDS - started)) s:"
    sinfo -N -o '%N %P %t %c %m' >&2
    echo "export SLURM_CONF=$SLURM_CONF"
}

stop_daemon() {  # stop_daemon NAME: SIGTERM, then SIGKILL after 15 s
    local pid i
    pid="$(cat "$ROOT/run/$1.pid" 2>/dev/null)" || return 0
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 30); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
}

stop_daemons() {
    local daemon
    for daemon in slurmd slurmctld slurmdbd mariadbd munged; do
        stop_daemon "$daemon"
    done
}

cmd_stop() {
    [ -d "$ROOT" ] || { say "not running (no $ROOT)"; return 0; }
    if alive slurmctld && alive slurmd; then
        # cancel the jobs and let slurmd end their steps: none outlives the cluster
        squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
        local deadline=$((SECONDS + 30))
        while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do
            sleep 0.5
        done
    fi
    stop_daemons
    rm -rf "$ROOT"
    say "stopped"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$SLURM_CONF" ;;
    *)
        echo "usage: $0 {start|stop|status|env}" >&2
        exit 2
        ;;
esac
