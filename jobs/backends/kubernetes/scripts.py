"""The two small programs every pod of a job runs, as POSIX sh (dash, busybox ash or bash).

They are shipped in the job's root ConfigMap and mounted at ``/paddlecloud`` (so Kubernetes
never expands ``$(…)`` in them) and take everything from environment variables that the pod
spec sets, which is also how the tests run them on a plain machine. Besides a POSIX shell they
need ``cp``, ``mkfifo``, ``tee``, ``date`` (coreutils), ``flock`` and ``setsid`` (util-linux)
and ``getent`` (libc-bin): Debian- and Ubuntu-based images, PaddlePaddle's among them, have all
of them (busybox has them as applets, but the tests run the scripts with dash and bash only).
"""

from __future__ import annotations

from paddlecloud_core.contract import ENDPOINT_VARIABLES

SCRIPTS_DIR = "/paddlecloud"
INIT_SCRIPT_NAME = "init.sh"
RUN_SCRIPT_NAME = "run.sh"

# init.sh's environment.
PACKAGE_ENV = "PADDLECLOUD_PACKAGE"
WORKSPACE_ENV = "PADDLECLOUD_WORKSPACE"
SITE_PACKAGES_ENV = "PADDLECLOUD_SITE_PACKAGES"
REQUIREMENTS_LOG_ENV = "PADDLECLOUD_REQUIREMENTS_LOG"
ENV_DIGEST_ENV = "PADDLECLOUD_ENV_DIGEST"
INSTALLED_ENV = "PADDLECLOUD_INSTALLED"
# How init.sh installs requirements.txt (part of an environment's digest: ``envs``).
PIP_INSTALL = ("-m", "pip", "install", "--disable-pip-version-check", "--no-input")
# run.sh's environment (its one argument is the job's entry command).
LOG_ENV = "PADDLECLOUD_LOG"
PEERS_ENV = "PADDLECLOUD_PEERS"
PEERS_LISTENING_ENV = "PADDLECLOUD_PEERS_LISTENING"
PEERS_ENDED_ENV = "PADDLECLOUD_PEERS_ENDED"
# The init container that waits for the peers runs ``run.sh`` with this one argument.
PEERS_ARGUMENT = "--peers"

INIT_SCRIPT = r"""# paddlecloud init.sh: prepares the workspace (every pod's init container).
#
#   PADDLECLOUD_PACKAGE           the trainer package, a directory on the PFS mount
#   PADDLECLOUD_WORKSPACE         where the replica runs (the pod's emptyDir)
#   PADDLECLOUD_SITE_PACKAGES     where requirements.txt is installed, on the PFS mount
#   PADDLECLOUD_REQUIREMENTS_LOG  pip's output is appended here
#   PADDLECLOUD_ENV_DIGEST        the digest of the requirements and image (when the portal
#                                 could read them); PADDLECLOUD_SITE_PACKAGES is then
#                                 <envs>/<digest>/site-packages, shared by every job of the
#                                 owner with that digest
#   PADDLECLOUD_INSTALLED         set: the image is the job's runtime image (jobs.builds), with
#                                 the package at PADDLECLOUD_PACKAGE and its requirements
#                                 installed: nothing to install
#
# The package is copied into the workspace. If it has a requirements.txt, pip (the image's
# python3 -m pip) installs it into PADDLECLOUD_SITE_PACKAGES once, although every pod runs
# this script.
#
# With a digest (the environment cache): found if <envs>/<digest>/site-packages is there (its
# "used" stamp is touched: the portal's LRU order); else the first pod to take the lock
# <digest>.lock (flock: the kernel, or the NFS server, lets it go when its holder dies)
# installs into <digest>.tmp-<pod>-<pid>, and renames it to <digest> only once pip succeeded,
# so a half-built environment is never seen; the pods that waited for the lock find it. When
# pip fails, its output goes to <digest>.failed and nothing is kept: the pods that waited fail
# with that output too, and a pod that comes later builds again.
#
# Without a digest (the old way): installed for the whole job into its own directory, a done
# marker once pip succeeded.
#
# When pip fails, this script exits with pip's exit code, and so the pod fails, pip's last
# lines on its stderr (the pod's termination message).
set -eu
: "${PADDLECLOUD_PACKAGE:?}" "${PADDLECLOUD_WORKSPACE:?}"
: "${PADDLECLOUD_SITE_PACKAGES:?}" "${PADDLECLOUD_REQUIREMENTS_LOG:?}"

fail() {
    echo "paddlecloud: $*" >&2
    exit 1
}

say() {  # to the pod's log and the requirements' log
    echo "paddlecloud: $*" | tee -a "$log" >&2
}

found() {
    touch "$env/used" 2>/dev/null || :
    say "environment $short found in $env"
    exit 0
}

# The environment of PADDLECLOUD_ENV_DIGEST, found, waited for or built; exits.
shared_env() {
    env=${site%/*}
    short=$(printf %.12s "$PADDLECLOUD_ENV_DIGEST")
    mkdir -p "${env%/*}" "${log%/*}"
    [ -d "$site" ] && found
    asked=$(date +%s)
    waited=
    exec 9>>"$env.lock"
    if ! flock -n 9; then
        waited=yes
        say "environment $short is being built by another pod: waiting"
        flock 9  # held until this script ends
    fi
    [ -d "$site" ] && found
    if [ -n "$waited" ] && [ -f "$env.failed" ]; then
        read -r when <"$env.failed" || when=0
        if [ "$when" -ge "$asked" ]; then  # the build this pod waited for
            tail -n +2 "$env.failed" | tail -n 20 >&2
            fail "environment $short could not be built by another pod: requirements.txt" \
                "could not be installed; see $log"
        fi
    fi
    rm -rf "$env".tmp-*  # what a builder killed half way left behind
    tmp="$env.tmp-${HOSTNAME:-pod}-$$"
    say "environment $short not found: ${HOSTNAME:-a pod} installs requirements.txt into $env"
    code=0
    (cd "$PADDLECLOUD_WORKSPACE" && "$python" @PIP_INSTALL@ --target "$tmp/site-packages" \
        -r requirements.txt) >"$tmp.log" 2>&1 || code=$?
    cat "$tmp.log" >>"$log"
    if [ "$code" -ne 0 ]; then
        { date +%s; cat "$tmp.log"; } >"$tmp.failed"
        mv -f "$tmp.failed" "$env.failed"
        tail -n 20 "$tmp.log" >&2
        rm -rf "$tmp" "$tmp.log"
        echo "paddlecloud: requirements.txt could not be installed (pip exited $code); see $log" >&2
        exit "$code"
    fi
    size=$(du -sk "$tmp" | cut -f1)
    printf '{"time": %s, "size": %s, "digest": "%s"}\n' "$(date +%s)" "$((size * 1024))" \
        "$PADDLECLOUD_ENV_DIGEST" >"$tmp/built.json"
    : >"$tmp/used"
    # rename(2), which never puts a directory into another: where the lock is only local (an
    # NFS mount with local_lock), a pod of another node may have renamed its build first.
    if ! "$python" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$tmp" "$env" \
            2>/dev/null; then
        [ -d "$site" ] || fail "environment $short could not be put in place at $env"
        rm -rf "$tmp"
    fi
    rm -f "$tmp.log" "$env.failed"
    say "environment $short built"
    exit 0
}

[ -d "$PADDLECLOUD_PACKAGE" ] || fail "the trainer package $PADDLECLOUD_PACKAGE is not a directory"
cp -R "$PADDLECLOUD_PACKAGE/." "$PADDLECLOUD_WORKSPACE/"

[ -z "${PADDLECLOUD_INSTALLED:-}" ] || exit 0
[ -f "$PADDLECLOUD_WORKSPACE/requirements.txt" ] || exit 0
site=$PADDLECLOUD_SITE_PACKAGES
log=$PADDLECLOUD_REQUIREMENTS_LOG
[ -e "$site.done" ] && exit 0  # the usual case: an earlier pod installed them

python=$(command -v python3 || command -v python) || fail "the image has no python3 or python"
[ -z "${PADDLECLOUD_ENV_DIGEST:-}" ] || shared_env
mkdir -p "${site%/*}" "${log%/*}"
exec 9>>"$site.lock"
flock 9  # held until this script ends
if [ ! -e "$site.done" ]; then
    rm -rf "$site.tmp" "$site"  # what an installer killed half way left behind
    echo "--- ${HOSTNAME:-a pod} installs requirements.txt into $site ---" >>"$log"
    code=0
    (cd "$PADDLECLOUD_WORKSPACE" && "$python" @PIP_INSTALL@ --target "$site.tmp" \
        -r requirements.txt) >>"$log" 2>&1 || code=$?
    if [ "$code" -ne 0 ]; then
        echo "paddlecloud: requirements.txt could not be installed (pip exited $code); see $log" >&2
        exit "$code"
    fi
    mv "$site.tmp" "$site"
    : >"$site.done"
fi
"""

RUN_SCRIPT = r"""# paddlecloud run.sh: runs the job's entry (every pod's main container), or, as
# `run.sh --peers` (every pod's init container "peers"), waits until its peers can be reached.
#
#   $1                         the job's entry, a shell command, run in the current directory;
#                              or --peers
#   PADDLECLOUD_LOG            the replica's log in PFS, appended to (it outlives the pod)
#   PADDLECLOUD_PEERS          host:port,… of the replicas this one talks to (itself included)
#   PADDLECLOUD_PEERS_LISTENING  host:port,… of those that listen before this one starts
#   PADDLECLOUD_PEERS_TIMEOUT  how long to wait for them (default 600 s)
#   PADDLECLOUD_PEERS_ENDED    a directory (a collective job's trainers'): a replica whose
#                              entry exited 0 leaves a file named by its host there, and a
#                              peer named there is not waited for
#
# Peers first. A replica's DNS name exists only once its pod has an IP, and PaddlePaddle looks a
# name up once and fails, and a trainer that cannot reach its pservers at once gives up: so the
# init container waits until every peer's name resolves and every listening peer accepts a
# connection (or fails, after PADDLECLOUD_PEERS_TIMEOUT seconds, naming the peer), saying what
# it waits for in the replica's log; the pod stays in its init phase meanwhile, which the portal
# shows. A finished pod leaves DNS (it is in no EndpointSlice any more): a collective job's
# trainer that starts after a peer has succeeded (its pod was started later than that peer's
# whole run) would wait for it for ever; so a replica whose entry exits 0 says so in
# PADDLECLOUD_PEERS_ENDED, and its peers go on without its address (its name stays).
# The main container waits for the addresses again (at once, unless a peer's pod was
# replaced meanwhile). Then the variables that name
# replicas (@ENDPOINT_VARIABLES@) are written with the peers'
# addresses, as PaddlePaddle compares them with POD_IP, the pod's IP: a pserver finds its own
# POD_IP:PADDLE_PORT in PADDLE_PSERVERS_IP_PORT_LIST, and `python -m paddle.distributed.launch`
# starts the rendezvous on the pod whose IP is PADDLE_MASTER's host.
#
# The entry's output goes both to the pod's log (stdout) and to PADDLECLOUD_LOG: through a FIFO
# to tee, as POSIX sh has no pipefail. The entry runs in a session of its own, and SIGTERM or
# SIGINT (Kubernetes stopping the pod) is passed on to all of it, so it can save its work
# within the grace period. This script exits with the entry's exit code (128+N when signal N
# ended it).
#
# Everything is in functions, called once the whole script has been read: bash may misparse a
# command it is still reading when a trap runs, and the traps are set from the start. For the
# same reason no $(…) runs once they are: bash parses a command substitution as it expands it,
# and a trap run meanwhile fails to parse ("trap: unexpected EOF while looking for matching
# `)'", exit 2). Output is captured through a file instead (capture).
set -eu
: "${PADDLECLOUD_LOG:?}"
[ "$#" -eq 1 ] || { echo "usage: run.sh ENTRY" >&2; exit 2; }

entry=
stopping=
signalled=
# Pass signal $1 on to the entry's process group; a signal that comes before the entry started
# is passed on once it has. Until setsid has made the group, a signal sent to the entry may be
# lost (the shell that forks it still has this script's handlers for a moment): so wait for the
# group (at most a second: an entry that died first never makes one), then signal it all.
stop() {
    stopping=$1
    signalled=yes
    [ -n "$entry" ] || return 0
    tries=100
    while [ "$tries" -gt 0 ] && ! kill -0 -"$entry" 2>/dev/null; do
        tries=$((tries - 1))
        sleep 0.01
    done
    kill -"$1" -"$entry" 2>/dev/null || kill -"$1" "$entry" 2>/dev/null || :
}

# capture NAME COMMAND...: the first line COMMAND prints, into the variable NAME (empty if
# none), without a command substitution.
capture() {
    _capture_name=$1
    shift
    _capture_file="${TMPDIR:-/tmp}/paddlecloud-capture.$$"
    "$@" >"$_capture_file" 2>/dev/null || :
    IFS= read -r "$_capture_name" <"$_capture_file" || :  # a last line without its newline too
    rm -f "$_capture_file"
}

say() {  # to the pod's log and the replica's
    echo "paddlecloud: $*" | tee -a "$PADDLECLOUD_LOG" >&2
}

# The address of host $1 (an IP is its own), or nothing while it has none.
address_of() {
    case $1 in
    *[!0-9.]*) getent hosts "$1" | { read -r address _ && printf '%s' "$address"; } ;;
    *) printf '%s' "$1" ;;
    esac
}

# Wait until every peer of PADDLECLOUD_PEERS has an address; peer_hosts lists them.
wait_for_peers() {
    timeout=${PADDLECLOUD_PEERS_TIMEOUT:-600}
    capture now date +%s
    deadline=$((now + timeout))
    peer_hosts=,
    rest=${PADDLECLOUD_PEERS:-}
    while [ -n "$rest" ]; do
        item=${rest%%,*}
        case $rest in *,*) rest=${rest#*,} ;; *) rest= ;; esac
        host=${item%:*}
        case $peer_hosts in *",$host,"*) continue ;; esac
        waited=
        while capture address address_of "$host" && [ -z "$address" ]; do
            case $stopping in TERM) exit 143 ;; INT) exit 130 ;; esac  # stopped meanwhile
            if [ -n "${PADDLECLOUD_PEERS_ENDED:-}" ] && [ -e "$PADDLECLOUD_PEERS_ENDED/$host" ]
            then
                say "$host has ended: not waiting for its address"
                break
            fi
            capture now date +%s
            if [ "$now" -ge "$deadline" ]; then
                say "$host has no address after ${timeout}s: is its pod running?"
                exit 1
            fi
            [ -n "$waited" ] || say "waiting for $host to have an address"
            waited=yes
            sleep 1
        done
        peer_hosts="$peer_hosts$host,"
    done
}

# Whether host $1 accepts a TCP connection on port $2 (python's socket, bash's /dev/tcp; with
# neither, yes: the entry's own retries must do).
accepts() {
    if [ -n "$python" ]; then
        "$python" -c 'import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()' "$1" "$2" \
            2>/dev/null
    elif [ -x /bin/bash ]; then
        /bin/bash -c 'exec 3<>"/dev/tcp/$1/$2"' accepts "$1" "$2" 2>/dev/null
    fi
}

# Wait until every peer of PADDLECLOUD_PEERS_LISTENING accepts connections.
wait_for_listening() {
    python=
    for candidate in python3 python; do
        command -v "$candidate" >/dev/null 2>&1 && { python=$candidate; break; }
    done
    rest=${PADDLECLOUD_PEERS_LISTENING:-}
    while [ -n "$rest" ]; do
        item=${rest%%,*}
        case $rest in *,*) rest=${rest#*,} ;; *) rest= ;; esac
        host=${item%:*}
        port=${item##*:}
        waited=
        until capture address address_of "$host" && accepts "$address" "$port"; do
            case $stopping in TERM) exit 143 ;; INT) exit 130 ;; esac
            capture now date +%s
            if [ "$now" -ge "$deadline" ]; then
                say "$host:$port accepts no connections after ${timeout}s: is it running?"
                exit 1
            fi
            [ -n "$waited" ] || say "waiting for $host:$port to accept connections"
            waited=yes
            sleep 1
        done
    done
}

# $1 (host[:port],…) with every peer's name replaced by its address, into $result.
with_addresses() {
    result=
    rest=$1
    while [ -n "$rest" ]; do
        item=${rest%%,*}
        case $rest in *,*) rest=${rest#*,} ;; *) rest= ;; esac
        host=${item%:*}
        port=${item#"$host"}
        case $peer_hosts in  # a peer that has ended has no address: its name stays
        *",$host,"*) capture address address_of "$host" && host=${address:-$host} ;;
        esac
        result="${result:+$result,}$host$port"
    done
}

# Run the entry $1, its output to the pod's log and the replica's; exit with its status.
run_entry() {
    fifo="${TMPDIR:-/tmp}/paddlecloud-run.$$"
    rm -f "$fifo"
    mkfifo "$fifo"
    tee -a "$PADDLECLOUD_LOG" <"$fifo" &
    tee_pid=$!
    setsid /bin/sh -c "$1" <"/dev/null" >"$fifo" 2>&1 &
    entry=$!  # also the id of its process group, once setsid has made it
    [ -z "$stopping" ] || stop "$stopping"

    # A trapped signal ends wait early (status > 128) and the entry's status is still to be
    # had from another wait; once it has been had, wait answers 127.
    set +e
    code=
    while :; do
        signalled=
        wait "$entry"
        status=$?
        if [ -n "$code" ] && [ "$status" -eq 127 ]; then break; fi
        code=$status
        if [ "$code" -le 128 ] || [ -z "$signalled" ]; then break; fi
    done
    # If the entry died before it opened the FIFO (stopped at once), tee still waits to open
    # it: opening it read-write does not block, and lets tee open it and see its end.
    exec 8<>"$fifo"
    exec 8>&-
    wait "$tee_pid"
    rm -f "$fifo"
    [ "$code" -ne 0 ] || ended
    exit "$code"
}

# Tell the peers still to start that this replica has succeeded (PADDLECLOUD_PEERS_ENDED): its
# host is the first of PADDLECLOUD_PEERS.
ended() {
    [ -n "${PADDLECLOUD_PEERS_ENDED:-}" ] || return 0
    own=${PADDLECLOUD_PEERS%%,*}
    { mkdir -p "$PADDLECLOUD_PEERS_ENDED" && : >"$PADDLECLOUD_PEERS_ENDED/${own%:*}"; } || :
}

main() {
    trap 'stop TERM' TERM
    trap 'stop INT' INT
    mkdir -p "${PADDLECLOUD_LOG%/*}"
    if [ "$1" = @PEERS_ARGUMENT@ ]; then
        wait_for_peers
        wait_for_listening
        exit 0
    fi
    [ -s "$PADDLECLOUD_LOG" ] && printf '\n--- restart ---\n' >>"$PADDLECLOUD_LOG"
    wait_for_peers
    for variable in @ENDPOINT_VARIABLES@; do
        eval "value=\${$variable:-}"
        [ -z "$value" ] || { with_addresses "$value"; export "$variable=$result"; }
    done
    run_entry "$1"
}

main "$@"
"""
INIT_SCRIPT = INIT_SCRIPT.replace("@PIP_INSTALL@", " ".join(PIP_INSTALL))
RUN_SCRIPT = (RUN_SCRIPT.replace("@ENDPOINT_VARIABLES@", " ".join(ENDPOINT_VARIABLES))
              .replace("@PEERS_ARGUMENT@", PEERS_ARGUMENT))
