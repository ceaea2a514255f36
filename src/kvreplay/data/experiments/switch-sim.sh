#!/bin/sh
# switch-sim.sh DIR PORT PYTHON [serve-sim options...]
# Stop the serve-sim recorded in DIR/sim.pid (waiting until it is gone), then
# start another on PORT in the background with the given options. The new server
# gets no pipe of ours (stdin /dev/null, output appended to DIR/sim.log), so the
# command returns as soon as the server is launched. Used by trace-ab.toml.
dir=$1; port=$2; py=$3; shift 3
if [ -f "$dir/sim.pid" ]; then
    pid=$(cat "$dir/sim.pid")
    kill "$pid" 2>/dev/null
    i=0
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    rm -f "$dir/sim.pid"
fi
[ "$1" = "--stop" ] && exit 0
# The server closes every descriptor above 2 it inherited before it starts (a caller's
# pipe kept open by a background server would hold the caller's wait for EOF).
"$py" -c 'import os, sys; os.closerange(3, 65536); os.execv(sys.executable, [sys.executable, "-m", "kvreplay", "serve-sim"] + sys.argv[1:])' \
    --port "$port" "$@" </dev/null >>"$dir/sim.log" 2>&1 &
echo $! > "$dir/sim.pid"
