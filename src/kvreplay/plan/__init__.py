"""The frozen plan: phases, selection, order, repeats, concurrency.

A plan is expanded into the exact request sequence of every phase before the
first request and written to ``plan.json`` with a SHA-256 of its own content, so
that ``kvreplay run --from-plan plan.json`` sends the same bodies in the same
order.

Phase shorthand (command line)::

    NAME:ORDER:cN[:xREPEATS][:lastN|firstN][:rRATE[:poissonSEED]]
    prime:forward:c1   replay:reverse:c4   control:forward:c1:x2:last12
    load:forward:c4:r40            open loop, 40 requests/s, at most 4 in flight
    load:forward:c64:r20:poisson7  open loop, Poisson arrivals (seed 7)
    (gamma arrivals, ``gamma:CV:SEED``, are written in a TOML plan or by ``kvreplay sweep --arrivals``)
    mix:shuffle:7:c4   (a seeded shuffle; the seed is the token after "shuffle")
    control:forward:c1:x2:last12:label=control:nocompare
                       a labelled control, never compared as a main arm
    grouped:by-prefix:c1           bodies grouped by shared prefix chain

TOML plan file (``--plan FILE``)::

    [[phase]]
    name = "prime"          # required, unique
    order = "forward"       # forward | reverse | shuffle:SEED | by-prefix
    concurrency = 1         # closed loop, >= 1
    repeats = 1
    select = "all"          # all | first:N | last:N | [i, j, ...]
    drain = false           # a drain must pass before the phase starts
    reset = false           # ask the server to empty its prefix cache first
    fresh = false           # require zeroed counters and an empty cache
    arrival = "constant"    # open loop: constant | poisson:SEED | gamma:CV:SEED | trace:FILE (omit: closed loop)
    rate = 40.0             # requests/s for constant / poisson / gamma
    interleave = {workload = "other.jsonl", every = 4}   # one body of a second
                            # workload after every 4 of this phase (cycling)
    label = "control"       # what the phase is for (prime, main, control, ...); optional
    comparable = true       # false: a control; never pooled with or compared as a main arm

Top-level settings of a TOML plan besides ``[[phase]]`` (``workload``, ``target``,
``backend`` as before)::

    abort_on_malformed = false   # the first malformed response aborts the run
    on_check_fail = "skip"       # a failed drain/fresh check sends nothing for that
                                 # phase ("skip", the default) or only marks it invalid ("mark")
    [identity]                   # identity pins (kvreplay.runner.identity), e.g.
    models = ["llama-3-8b"]      # checked before the first request and at every counter read
    [fleet]                      # a router and the replicas behind it (kvreplay.runner.fleet)
    router = "http://127.0.0.1:30000"   # requests go here (the command line's --target wins)
    replicas = ["http://127.0.0.1:8001", {url = "http://127.0.0.1:8002", backend = "llamacpp"}]

``by-prefix`` keeps the selection but groups bodies that share a prefix chain
(``kvreplay.workload.prefix_chain``: system block, then each further message):
bodies are sorted by the first appearance of their chain links, depth by depth,
so every group of bodies with the same system block is contiguous, and inside it
every group with the same next message, ties in selection order. ``interleave``
is applied last (after order and repeats): it mixes unrelated traffic into the
phase, the bodies of the second workload taking indices after the main
workload's (``plan.json`` lists it under ``interleave_workloads``). Plans that use
neither write exactly the plan.json they did before these options existed.

Unknown keys and bad values raise ``ConfigError`` naming file, line and field.
"""

from kvreplay.plan._load import plan_from_json
from kvreplay.plan._model import (
    CHECK_FAIL_MODES,
    PLAN_FORMAT,
    ExtraWorkload,
    Interleave,
    Offsets,
    Pairs,
    Phase,
    PhaseSpec,
    Plan,
    SequenceView,
    build_plan,
    by_prefix,
    gamma_offsets,
    interleave_sequence,
    json_chunks,
    load_plan_toml,
    parse_phase,
    past_the_workload,
)
from kvreplay.plan._spec import (  # re-exported bounds, and the one builder of a sequence entry
    MAX_CONCURRENCY,
    MAX_GAMMA_CV,
    MAX_POSITIONS,
    MAX_RATE,
    MIN_GAMMA_CV,
    MIN_RATE,
    sequence_entry,
)

__all__ = [
    "CHECK_FAIL_MODES",
    "MAX_CONCURRENCY",
    "MAX_GAMMA_CV",
    "MAX_POSITIONS",
    "MAX_RATE",
    "MIN_GAMMA_CV",
    "MIN_RATE",
    "PLAN_FORMAT",
    "ExtraWorkload",
    "Interleave",
    "Offsets",
    "Pairs",
    "Phase",
    "PhaseSpec",
    "Plan",
    "SequenceView",
    "build_plan",
    "by_prefix",
    "gamma_offsets",
    "interleave_sequence",
    "json_chunks",
    "load_plan_toml",
    "parse_phase",
    "past_the_workload",
    "plan_from_json",
    "sequence_entry",
]
