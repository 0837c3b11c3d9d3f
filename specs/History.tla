------------------------------ MODULE History ------------------------------
(***************************************************************************)
(* The protocols at the granularity of a run's history events, for trace  *)
(* validation: every event kind of reference_node/protocol/history.py is  *)
(* one action, whose guard is the protocol rule the abstract modules       *)
(* (Detector, Commit, Rejoin) verify, and the safety properties S1-S4 are  *)
(* folded into the guards, so an event that breaks one cannot be           *)
(* explained.  A generated module binds Trace to the run's events (in the *)
(* history's total order) and TLC checks the trace is a behaviour: the    *)
(* cursor l advances by one per event; variables an event does not speak  *)
(* about keep their values (partial updates).                              *)
(*                                                                         *)
(* Crashes, pauses and partitions are the harness's fault events.  S4 is   *)
(* demanded only inside the envelope: once a network fault was injected    *)
(* (anything but crash/restart/pause/resume/stop), a death declared of a   *)
(* live node is no longer evidence of a bug, as the S4 checker says        *)
(* "unknown".                                                              *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS Trace, Nodes

Harness == "harness"
ProcessFaults == {"crash", "restart", "pause", "resume", "stop", "kill"}
NoBallot == <<-1, -1>>
BallotLess(a, b) == a[1] < b[1] \/ (a[1] = b[1] /\ a[2] < b[2])
BallotAtLeast(a, b) == ~BallotLess(a, b)
IsMajorityOf(q, set) == q \subseteq set /\ 2 * Cardinality(q) > Cardinality(set)

VARIABLES
    l,          \* cursor: the next event of Trace to explain
    up,         \* up[n]: n's process runs (between its start and a crash/stop)
    paused,     \* paused[n]: SIGSTOPped (not alive, logs nothing)
    inc,        \* inc[n]: n's incarnation
    bornInc,    \* bornInc[n]: the incarnation n's current process started with
    suspected,  \* suspected[n]: [peer |-> incarnation] n suspects
    epoch,      \* epoch[n]: n's view epoch
    voters,     \* the configured voters (from config changes and commits)
    promised,   \* promised[n]: [step, bal] of n's last promise
    accepted,   \* accepted[n]: [step, bal, val] of n's last accept
    applied,    \* applied[n]: the last step n applied
    paramsAt,   \* paramsAt: step -> parameter fingerprint after it (S1)
    valueAt,    \* valueAt: step -> committed value fingerprint (S1)
    envelope,   \* TRUE while no network fault was ever injected (S4 applies)
    declared    \* declared[p]: incarnations of p some node declared dead

vars == <<l, up, paused, inc, bornInc, suspected, epoch, voters, promised, accepted,
          applied, paramsAt, valueAt, envelope, declared>>

Init ==
    /\ l = 1
    /\ up = [n \in Nodes |-> FALSE]
    /\ paused = [n \in Nodes |-> FALSE]
    /\ inc = [n \in Nodes |-> -1]      \* -1: never started
    /\ bornInc = [n \in Nodes |-> -1]
    /\ suspected = [n \in Nodes |-> [p \in {} |-> 0]]
    /\ epoch = [n \in Nodes |-> 0]
    /\ voters = {}
    /\ promised = [n \in Nodes |-> [step |-> -1, bal |-> NoBallot]]
    /\ accepted = [n \in Nodes |-> [step |-> -1, bal |-> NoBallot, val |-> ""]]
    /\ applied = [n \in Nodes |-> -1]
    /\ paramsAt = [s \in {} |-> ""]
    /\ valueAt = [s \in {} |-> ""]
    /\ envelope = TRUE
    /\ declared = [n \in Nodes |-> {}]

ev == Trace[l]
Running(n) == n \in Nodes /\ up[n] /\ ~paused[n]
\* Who may author an event: a node that has started.  Not "Running": the harness
\* logs a crash or pause before the signal lands, so a node's last events may
\* follow the fault event in the total order (a real race, not a bug).
Logs(n) == n \in Nodes /\ inc[n] >= 0
Set(f, k, v) == [x \in DOMAIN f \cup {k} |-> IF x = k THEN v ELSE f[x]]
\* Per-step facts are kept for the last StepWindow steps only: the state (and the
\* cost of each event) stays bounded however long the run.  A commit or rejoin
\* of an older step is still explained but its fingerprints are not compared.
StepWindow == 64
SetRecent(f, k, v) ==
    [x \in {y \in DOMAIN f : y > k - StepWindow} \cup {k} |-> IF x = k THEN v ELSE f[x]]
Known(f, k, v) == k \in DOMAIN f => f[k] = v
Advance == l' = l + 1

-----------------------------------------------------------------------------
(* Lifecycle. *)

\* Every process start is a new incarnation, above any the node had.  A running
\* node may start again without a crash fault: a node declared dead restarts
\* itself to rejoin.
Start ==
    /\ ev.k = "start" /\ ev.n \in Nodes /\ ev.inc > inc[ev.n]
    /\ up' = [up EXCEPT ![ev.n] = TRUE]
    /\ paused' = [paused EXCEPT ![ev.n] = FALSE]
    /\ inc' = [inc EXCEPT ![ev.n] = ev.inc]
    /\ bornInc' = [bornInc EXCEPT ![ev.n] = ev.inc]
    /\ suspected' = [suspected EXCEPT ![ev.n] = [p \in {} |-> 0]]
    /\ epoch' = [epoch EXCEPT ![ev.n] = 0]  \* a new process counts its view epochs anew
    /\ UNCHANGED <<voters, promised, accepted, applied, paramsAt, valueAt, envelope, declared>>

Stop ==
    /\ ev.k = "stop" /\ Logs(ev.n)
    /\ up' = [up EXCEPT ![ev.n] = FALSE]
    /\ UNCHANGED <<paused, inc, bornInc, suspected, epoch, voters, promised, accepted,
                   applied, paramsAt, valueAt, envelope, declared>>

\* Events that change no protocol state but can only come from a running process.
Bookkeeping ==
    /\ ev.k \in {"ready", "agg_send", "aggregate_serve", "train_step", "frame_drop",
                 "checkpoint_write", "checkpoint_skip", "checkpoint_fail", "rejoin_begin",
                 "byzantine", "worker_stall"}
    /\ Logs(ev.n)
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, voters, promised, accepted,
                   applied, paramsAt, valueAt, envelope, declared>>

\* The node's control loop woke more than Δ_proc late: for that while it was not
\* alive in S4's sense (it handled no events), so the run left the envelope and
\* S4 is no longer demanded, as for a network fault (the S4 checker: "unknown").
LoopStall ==
    /\ ev.k = "loop_stall" /\ Logs(ev.n)
    /\ envelope' = FALSE
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, voters, promised, accepted,
                   applied, paramsAt, valueAt, declared>>

RunMark ==
    /\ ev.k = "run_mark"
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, voters, promised, accepted,
                   applied, paramsAt, valueAt, envelope, declared>>

Fault ==
    /\ ev.k = "fault"
    /\ ev.tg \subseteq Nodes \cup {Harness, "*"}  \* "*": every node
    /\ LET targets == IF "*" \in ev.tg THEN Nodes ELSE ev.tg \cap Nodes
           crash == ev.op \in {"crash", "kill"} /\ ev.ph = "inject"
           pause == ev.op = "pause" /\ ev.ph = "inject"
           resume == (ev.op = "pause" /\ ev.ph = "heal") \/ ev.op = "resume"
       IN /\ up' = [n \in Nodes |-> IF n \in targets /\ crash THEN FALSE ELSE up[n]]
          /\ paused' = [n \in Nodes |-> IF n \in targets /\ pause THEN TRUE
                                        ELSE IF n \in targets /\ resume THEN FALSE
                                        ELSE paused[n]]
          /\ envelope' = (envelope /\ ev.op \in ProcessFaults)
    /\ UNCHANGED <<inc, bornInc, suspected, epoch, voters, promised, accepted, applied,
                   paramsAt, valueAt, declared>>

-----------------------------------------------------------------------------
(* Failure detector and membership. *)

Suspect ==
    /\ ev.k = "suspect" /\ Logs(ev.n) /\ ev.peer \in Nodes /\ ev.peer # ev.n
    /\ suspected' = [suspected EXCEPT ![ev.n] = Set(@, ev.peer, ev.pinc)]
    /\ UNCHANGED <<up, paused, inc, bornInc, epoch, voters, promised, accepted, applied,
                   paramsAt, valueAt, envelope, declared>>

\* A refutation raises the incarnation.
Refute ==
    /\ ev.k = "refute" /\ Logs(ev.n) /\ ev.inc > inc[ev.n]
    /\ inc' = [inc EXCEPT ![ev.n] = ev.inc]
    /\ UNCHANGED <<up, paused, bornInc, suspected, epoch, voters, promised, accepted,
                   applied, paramsAt, valueAt, envelope, declared>>

\* Confirmation needs a standing suspicion of that incarnation (no eager-dead),
\* and inside the envelope the peer's current life must be over (S4).
\* A node may also record that a peer declared *it* dead (peer = itself, before
\* it rejoins with a new incarnation); the declaring peer's own event is the one
\* the rules apply to.
DeclareDeadSelf ==
    /\ ev.k = "declare_dead" /\ Logs(ev.n) /\ ev.peer = ev.n
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, voters, promised, accepted,
                   applied, paramsAt, valueAt, envelope, declared>>

\* Own evidence: a standing suspicion of that incarnation (no eager-dead).
\* Second-hand: a death of that incarnation another node already declared,
\* learnt by gossip ("confirmed by ...").  Either way, inside the envelope the
\* peer's current life must be over (S4).
DeclareDead ==
    /\ ev.k = "declare_dead" /\ Logs(ev.n) /\ ev.peer \in Nodes /\ ev.peer # ev.n
    /\ \/ ev.peer \in DOMAIN suspected[ev.n] /\ suspected[ev.n][ev.peer] = ev.pinc
       \/ ev.pinc \in declared[ev.peer]
    /\ envelope => ~(Running(ev.peer) /\ ev.pinc >= bornInc[ev.peer])
    /\ suspected' = [suspected EXCEPT ![ev.n] =
                        [p \in DOMAIN @ \ {ev.peer} |-> @[p]]]
    /\ declared' = [declared EXCEPT ![ev.peer] = @ \cup {ev.pinc}]
    /\ UNCHANGED <<up, paused, inc, bornInc, epoch, voters, promised, accepted, applied,
                   paramsAt, valueAt, envelope>>

DeclareAlive ==
    /\ ev.k = "declare_alive" /\ Logs(ev.n) /\ ev.peer \in Nodes
    /\ suspected' = [suspected EXCEPT ![ev.n] =
                        [p \in DOMAIN @ \ {ev.peer} |-> @[p]]]
    /\ UNCHANGED <<up, paused, inc, bornInc, epoch, voters, promised, accepted, applied,
                   paramsAt, valueAt, envelope, declared>>

\* View epochs only rise within one process life.
ViewChange ==
    /\ ev.k = "view_change" /\ Logs(ev.n) /\ ev.ep >= epoch[ev.n]
    /\ epoch' = [epoch EXCEPT ![ev.n] = ev.ep]
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, voters, promised, accepted, applied,
                   paramsAt, valueAt, envelope, declared>>

\* One node at a time, so consecutive majorities overlap.
ConfigChange ==
    /\ ev.k = "config_change" /\ Logs(ev.n)
    /\ voters = {} \/ Cardinality((voters \ ev.vs) \cup (ev.vs \ voters)) <= 1
    /\ voters' = ev.vs
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, promised, accepted, applied,
                   paramsAt, valueAt, envelope, declared>>

-----------------------------------------------------------------------------
(* Step commit (single-decree Paxos per step). *)

\* A promise at least the last one: a duplicated Prepare is answered again (the
\* acceptor's rule is b >= p; commit.py), which promises nothing new.
Promise ==
    /\ ev.k = "promise" /\ Logs(ev.n)
    /\ promised[ev.n].step = ev.st => BallotAtLeast(ev.bal, promised[ev.n].bal)
    /\ promised' = [promised EXCEPT ![ev.n] = [step |-> ev.st, bal |-> ev.bal]]
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, voters, accepted, applied,
                   paramsAt, valueAt, envelope, declared>>

Propose ==
    /\ ev.k = "propose" /\ Logs(ev.n)
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, voters, promised, accepted,
                   applied, paramsAt, valueAt, envelope, declared>>

\* Accept only a ballot at least the promise, and only holding the bytes.
Accept ==
    /\ ev.k = "accept" /\ Logs(ev.n) /\ ev.hb
    /\ promised[ev.n].step = ev.st => BallotAtLeast(ev.bal, promised[ev.n].bal)
    /\ (accepted[ev.n].step = ev.st /\ accepted[ev.n].bal = ev.bal) => accepted[ev.n].val = ev.val
    /\ promised' = [promised EXCEPT ![ev.n] = [step |-> ev.st, bal |-> ev.bal]]
    /\ accepted' = [accepted EXCEPT ![ev.n] = [step |-> ev.st, bal |-> ev.bal, val |-> ev.val]]
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, voters, applied,
                   paramsAt, valueAt, envelope, declared>>

\* S3: the quorum is a majority of the configured voters; S1: one value and one
\* parameter fingerprint per step, whoever commits it.
Commit ==
    LET theVoters == IF voters = {} THEN ev.vs ELSE voters IN
    /\ ev.k = "commit" /\ Logs(ev.n)
    /\ ev.vs = {} \/ voters = {} \/ ev.vs = voters
    /\ IsMajorityOf(ev.q, theVoters)
    /\ Known(valueAt, ev.st, ev.val) /\ Known(paramsAt, ev.st, ev.par)
    /\ ev.st > applied[ev.n]
    /\ applied' = [applied EXCEPT ![ev.n] = ev.st]
    /\ valueAt' = SetRecent(valueAt, ev.st, ev.val)
    /\ paramsAt' = SetRecent(paramsAt, ev.st, ev.par)
    /\ voters' = theVoters
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, promised, accepted, envelope, declared>>

-----------------------------------------------------------------------------
(* Rejoin. *)

\* The state a rejoining node installs must be the committed one of its step (S1).
RejoinDone ==
    /\ ev.k = "rejoin_done" /\ Logs(ev.n) /\ ev.ok
    /\ Known(paramsAt, ev.st, ev.par)
    /\ applied' = [applied EXCEPT ![ev.n] = ev.st]
    /\ paramsAt' = SetRecent(paramsAt, ev.st, ev.par)
    /\ UNCHANGED <<up, paused, inc, bornInc, suspected, epoch, voters, promised, accepted,
                   valueAt, envelope, declared>>

-----------------------------------------------------------------------------
Explain ==
    \/ Start \/ Stop \/ Bookkeeping \/ LoopStall \/ RunMark \/ Fault
    \/ Suspect \/ Refute \/ DeclareDead \/ DeclareDeadSelf \/ DeclareAlive \/ ViewChange \/ ConfigChange
    \/ Promise \/ Propose \/ Accept \/ Commit \/ RejoinDone

\* Trace validation reads the verdict off the search depth: the deepest state has
\* l = depth, so depth Len(Trace) + 1 means every event was explained, and a
\* smaller depth d names Trace[d] as the first event no action explains.
Next == l <= Len(Trace) /\ Explain /\ Advance

=============================================================================
