------------------------------- MODULE Commit -------------------------------
(***************************************************************************)
(* Strict-mode step commit: single-decree Paxos per training step, as the *)
(* commit core runs it.  Mirrors the history events: Promise (phase 1b),   *)
(* Propose (phase 2a), Accept (phase 2b), Commit (learn and apply), and   *)
(* Learn (a laggard told the decision by a peer: the core's Decided).      *)
(*   - ballots are (round, proposer) pairs, encoded round * N + proposer;  *)
(*   - an acceptor persists its promise and its accept before replying;    *)
(*   - a retry adopts the value of the highest accepted ballot it hears;   *)
(*   - an acceptor accepts only while holding the aggregate's bytes (it    *)
(*     writes them with its accept, so they survive a restart);            *)
(*   - a quorum is a majority of the configured voters, never of the       *)
(*     detector view; the leader of a side is its lowest live node (above *)
(*     its vote floor).                                                     *)
(* The value of a step is the aggregate (its fingerprint plus contributor *)
(* set), abstracted to an element of Values; a node's parameters are the   *)
(* sequence of values it applied, so equal sequences = equal fingerprints. *)
(*                                                                         *)
(* Environment: Crash, Restart, Partition (any split into two sides) and   *)
(* Heal.  Proposals live in a set that only grows (loss, delay and      *)
(* duplication are behaviours); promises and accepts are read from the    *)
(* acceptors' persisted state, across sides only while connected.         *)
(*                                                                         *)
(* Retries: a leader prepares the lowest ballot of its own above every     *)
(* promise on its side (it learns them from Nacks: the core's retry takes  *)
(* round = max(highest round seen, own promise) + 1).  It prepares again   *)
(* only when that top promise is another node's; while the top is its own  *)
(* it re-sends the same prepare to acceptors that did not promise yet (a   *)
(* delayed delivery).  So a new ballot needs a new leader or a stale       *)
(* promise that reappears (restart, heal): rounds are bounded by faults.   *)
(*                                                                         *)
(* Records, pruning and the vote floor: an acceptor keeps the persisted    *)
(* records of its newest RecordsKept steps only (the driver's              *)
(* AcceptorStore); before it deletes older ones it writes, durably, the   *)
(* highest pruned step (floor, "pruned-through").  An acceptor votes only *)
(* on its own next step (the core buffers later steps' messages and        *)
(* answers earlier ones with Decided), and a node neither votes nor leads *)
(* at or below its floor: it only learns those steps.  A restarted node   *)
(* may roll back: its rejoin installs the state of a live peer behind it, *)
(* skipping a source behind its floor, or (OldCheckpoints) it resumes from *)
(* a checkpoint older than its last step.  Without the floor (bug         *)
(* no-vote-floor) a rolled-back node votes again on steps whose records   *)
(* it pruned, as forget-vote does, and two values commit for one step.    *)
(*                                                                         *)
(* Fairness (what the implementation assumes, for L2): a live node that   *)
(* can take a protocol step eventually takes one (the core's retry timer  *)
(* fires; one WF over all protocol steps, the same as one per node here:   *)
(* see Fairness).  The environment has no fairness but injects             *)
(* finitely many faults (MaxCrashes, MaxPartitions).                       *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, Sequences

CONSTANTS
    N,              \* number of configured voters, named 1..N
    MaxStep,        \* steps to commit
    MaxCrashes,     \* crashes the environment may inject
    MaxPartitions,  \* partitions the environment may inject
    RecordsKept,    \* acceptor records an acceptor keeps: those of its newest steps
    OldCheckpoints, \* TRUE: a restart may resume from an older checkpoint of its own
    Bugs            \* switched-on known bugs, by their bugs.py names

ASSUME Bugs \subseteq {"no-quorum", "ack-before-apply", "forget-vote", "no-vote-floor"}
ASSUME RecordsKept \in Nat /\ RecordsKept >= 1 /\ OldCheckpoints \in BOOLEAN

Nodes == 1..N
\* The aggregate each node computes from the gradients it received: node 1 saw
\* a different contributor set from the others, so two values compete and
\* node 1's is held by node 1 alone until someone fetches it.
AggregateOf(n) == IF n = 1 THEN "a" ELSE "b"
Values == {AggregateOf(n) : n \in Nodes}
Steps == 1..MaxStep
Owner(b) == (b % N) + 1
Round(b) == b \div N
BallotOf(n, r) == r * N + (n - 1)
None == "none"
Bug(name) == name \in Bugs

VARIABLES
    up,         \* up[n]: the process runs
    side,       \* side[n]: 0 or 1; nodes talk only within a side
    maxBal,     \* maxBal[n][s]: highest ballot promised (persisted), -1 none
    accBal,     \* accBal[n][s]: ballot of the last accept (persisted), -1 none
    accVal,     \* accVal[n][s]: value of the last accept (persisted)
    bytes,      \* bytes[n][s]: aggregates whose bytes n holds (on disk); each
                \* node starts every step holding its own aggregate
    params,     \* params[n]: values applied, in step order
    floor,      \* floor[n]: highest step whose record n pruned (persisted), 0 none
    proposals,  \* every proposal (phase 2a message) ever sent
    commits,    \* ghost: [step, value, majority] of every commit (majority: its
                \* quorum was a majority of the configured voters)
    faults      \* [crashes, partitions] injected so far

vars == <<up, side, maxBal, accBal, accVal, bytes, params, floor, proposals, commits, faults>>

Reachable(a, b) == side[a] = side[b]
View(n) == {m \in Nodes : up[m] /\ Reachable(n, m)}
IsMajorityOf(q, set) == q \subseteq set /\ 2 * Cardinality(q) > Cardinality(set)
\* The mistake no-quorum makes: a majority of the detector view will do.
IsQuorum(q, n) == IF Bug("no-quorum") THEN IsMajorityOf(q, View(n)) /\ q # {}
                  ELSE IsMajorityOf(q, Nodes)
NextStep(n) == Len(params[n]) + 1
\* The side's lowest live node whose next step is above its floor (a node below
\* it only learns; the next ranked node takes over, as the core's fallback does).
MayLead(n) == {m \in View(n) : NextStep(m) > floor[m]}
Leader(n) == n \in MayLead(n) /\ \A k \in MayLead(n) : n <= k
Max(set) == CHOOSE x \in set : \A y \in set : y <= x
\* The highest promise for step s among n's side's live acceptors (-1: none).
TopBal(n, s) == Max({maxBal[a][s] : a \in View(n)})
\* The ballot n's leader prepares: its own top promise again, or its lowest above it.
PrepareBallot(n, s) ==
    LET top == TopBal(n, s)
        r == IF top < 0 THEN 0 ELSE Round(top)
    IN  IF top >= 0 /\ Owner(top) = n THEN top
        ELSE IF BallotOf(n, r) > top THEN BallotOf(n, r) ELSE BallotOf(n, r + 1)

\* The steps n holds an acceptor record of (a promise; an accept promises too).
RecordSteps(n) == {t \in Steps : maxBal[n][t] >= 0}
\* The records n deletes when it writes one for step s: all but its newest
\* RecordsKept steps (the store orders its files by step).  The record of s
\* itself stays until a later write even when it is older (a rolled-back node):
\* the store deletes it right after writing, but the reply was sent and the
\* process remembers its vote until it stops; this spec reads persisted records
\* as those replies (see Propose), so the record stands for both.
PrunedBy(n, s) ==
    LET r == RecordSteps(n) \cup {s}
    IN  {t \in r \ {s} : Cardinality({u \in r : u > t}) >= RecordsKept}
\* n's record function rec after writing new for step s, blank where pruned.
Stored(n, s, rec, new, blank) ==
    [t \in Steps |-> IF t \in PrunedBy(n, s) THEN blank ELSE IF t = s THEN new ELSE rec[t]]
\* The floor goes to disk before the records go; no-vote-floor never writes it.
RaisedFloor(n, s) ==
    IF Bug("no-vote-floor") THEN floor[n] ELSE Max({floor[n]} \cup PrunedBy(n, s))
\* n may vote or lead on step s: its own next step, above its floor.
MayVote(n, s) == s = NextStep(n) /\ s > floor[n]

Init ==
    /\ up = [n \in Nodes |-> TRUE]
    /\ side = [n \in Nodes |-> 0]
    /\ maxBal = [n \in Nodes |-> [s \in Steps |-> -1]]
    /\ accBal = [n \in Nodes |-> [s \in Steps |-> -1]]
    /\ accVal = [n \in Nodes |-> [s \in Steps |-> None]]
    /\ bytes = [n \in Nodes |-> [s \in Steps |-> {AggregateOf(n)}]]
    /\ params = [n \in Nodes |-> <<>>]
    /\ floor = [n \in Nodes |-> 0]
    /\ proposals = {}
    /\ commits = {}
    /\ faults = [crashes |-> 0, partitions |-> 0]


-----------------------------------------------------------------------------
(* Protocol. *)

\* Bulk transfer, folded into the step that needs the bytes: v's bytes are
\* held by n already, or fetched now from a live peer on n's side.
CanFetch(n, s, v) ==
    \/ v \in bytes[n][s]
    \/ \E h \in Nodes : up[h] /\ Reachable(n, h) /\ v \in bytes[h][s]
Fetch(n, s, v) == bytes' = [bytes EXCEPT ![n][s] = @ \cup {v}]

\* Phase 1a + 1b, the event "promise": the side's leader asks for promises
\* on PrepareBallot (its first round, a retry above a stale promise, or the same
\* prepare delivered late); the acceptors in acc (any non-empty set on its
\* side: the others did not get the request yet) promise it, persisted before
\* replying.  Next takes one acceptor at a time (acc = {a}): each promise is
\* local to its acceptor, and a crash before a promise is the behaviour where
\* that acceptor has not promised yet.
Promise(n, acc) ==
    LET s == NextStep(n)
        b == PrepareBallot(n, s)
    IN
    /\ up[n] /\ Leader(n) /\ s \in Steps /\ s > floor[n]
    /\ acc # {}
    /\ \A a \in acc : up[a] /\ Reachable(a, n) /\ MayVote(a, s) /\ b > maxBal[a][s]
    /\ maxBal' = [a \in Nodes |-> IF a \in acc THEN Stored(a, s, maxBal[a], b, -1) ELSE maxBal[a]]
    /\ accBal' = [a \in Nodes |-> IF a \in acc THEN Stored(a, s, accBal[a], accBal[a][s], -1)
                                  ELSE accBal[a]]
    /\ accVal' = [a \in Nodes |-> IF a \in acc THEN Stored(a, s, accVal[a], accVal[a][s], None)
                                  ELSE accVal[a]]
    /\ floor' = [a \in Nodes |-> IF a \in acc THEN RaisedFloor(a, s) ELSE floor[a]]
    /\ UNCHANGED <<up, side, bytes, params, proposals, commits, faults>>

\* Phase 2a, the event "propose": q, the acceptors on n's side still holding
\* n's promise on b, is a quorum; n adopts the value of the highest ballot q
\* accepted, or its own aggregate.
\* (Reading the acceptors' persisted state stands for their promise replies:
\* with maxBal = b they accepted nothing since promising, so it is the same.)
Propose(n, b) ==
    LET s == NextStep(n)
        q == {a \in Nodes : up[a] /\ Reachable(a, n) /\ maxBal[a][s] = b}
        voted == {a \in q : accBal[a][s] >= 0}
        highest == CHOOSE a \in voted : \A k \in voted : accBal[k][s] <= accBal[a][s]
        v == IF voted = {} THEN AggregateOf(n) ELSE accVal[highest][s]
    IN
    /\ up[n] /\ Owner(b) = n /\ s \in Steps /\ s > floor[n]
    /\ ~\E p \in proposals : p.step = s /\ p.bal = b
    /\ IsQuorum(q, n)
    /\ proposals' = proposals \cup {[from |-> n, step |-> s, bal |-> b, val |-> v]}
    /\ UNCHANGED <<up, side, maxBal, accBal, accVal, bytes, params, floor, commits, faults>>

\* Phase 2b, the event "accept", by the acceptors in acc (one step, as for
\* promises); persisted before the reply.
CanAccept(a, p) ==
    /\ up[a] /\ Reachable(p.from, a) /\ MayVote(a, p.step)
    /\ p.bal >= maxBal[a][p.step] /\ accBal[a][p.step] # p.bal
    /\ Bug("ack-before-apply") \/ CanFetch(a, p.step, p.val)
Accept(p, acc) ==
    /\ p \in proposals /\ acc # {}
    /\ \A a \in acc : CanAccept(a, p)
    /\ maxBal' = [a \in Nodes |-> IF a \in acc THEN Stored(a, p.step, maxBal[a], p.bal, -1) ELSE maxBal[a]]
    /\ accBal' = [a \in Nodes |-> IF a \in acc THEN Stored(a, p.step, accBal[a], p.bal, -1) ELSE accBal[a]]
    /\ accVal' = [a \in Nodes |-> IF a \in acc THEN Stored(a, p.step, accVal[a], p.val, None)
                                  ELSE accVal[a]]
    /\ floor' = [a \in Nodes |-> IF a \in acc THEN RaisedFloor(a, p.step) ELSE floor[a]]
    /\ bytes' = IF Bug("ack-before-apply") THEN bytes  \* the mistake: votes without the bytes
                ELSE [a \in Nodes |-> IF a \in acc THEN [bytes[a] EXCEPT ![p.step] = @ \cup {p.val}]
                                      ELSE bytes[a]]
    /\ UNCHANGED <<up, side, params, proposals, commits, faults>>

\* The event "commit": the acceptors on n's side that accepted proposal p form
\* a quorum q; n applies p's value, which needs its bytes.
Commit(n, p) ==
    LET s == p.step
        v == p.val
        q == {a \in Nodes : accBal[a][s] = p.bal /\ accVal[a][s] = v /\ Reachable(a, n)}
        b == p.bal
    IN
    /\ up[n] /\ s = NextStep(n) /\ IsQuorum(q, n)
    /\ CanFetch(n, s, v) /\ Fetch(n, s, v)
    /\ params' = [params EXCEPT ![n] = Append(@, v)]
    /\ commits' = commits \cup {[step |-> s, value |-> v, majority |-> IsMajorityOf(q, Nodes)]}
    /\ UNCHANGED <<up, side, maxBal, accBal, accVal, floor, proposals, faults>>

\* A laggard learns a decision from a live peer on its side that applied it (the
\* core's Decided answer to a message of an older step), then applies it.
Learn(n) ==
    LET s == NextStep(n) IN
    /\ up[n] /\ s \in Steps
    /\ \E m \in View(n) :
          /\ Len(params[m]) >= s
          /\ CanFetch(n, s, params[m][s]) /\ Fetch(n, s, params[m][s])
          /\ params' = [params EXCEPT ![n] = Append(@, params[m][s])]
    /\ UNCHANGED <<up, side, maxBal, accBal, accVal, floor, proposals, commits, faults>>

-----------------------------------------------------------------------------
(* Environment. *)

Crash(n) ==
    /\ up[n] /\ faults.crashes < MaxCrashes
    /\ up' = [up EXCEPT ![n] = FALSE]
    /\ faults' = [faults EXCEPT !.crashes = @ + 1]
    /\ UNCHANGED <<side, maxBal, accBal, accVal, bytes, params, floor, proposals, commits>>

\* The state a restarted node resumes from (its rejoin): its own, or that of a
\* live peer on its side that is behind it (a rollback), unless that peer is
\* behind its floor (the rejoin core skips such a source); with OldCheckpoints
\* also a checkpoint of its own older than its last step (checkpoints are taken
\* every checkpoint_every steps, more than the records kept).  A source ahead
\* of it is the same as learning the steps in between (Learn).
ResumeFrom(n) ==
    {params[n]}
    \cup {params[m] : m \in {m \in View(n) \ {n} :
                        Len(params[m]) < Len(params[n]) /\ Len(params[m]) >= floor[n]}}
    \cup (IF OldCheckpoints THEN {SubSeq(params[n], 1, k) : k \in 0..Len(params[n])} ELSE {})

\* A restart keeps what was persisted; forget-vote loses the promise and accept.
Restart(n) ==
    /\ ~up[n]
    /\ up' = [up EXCEPT ![n] = TRUE]
    /\ IF Bug("forget-vote")
       THEN /\ maxBal' = [maxBal EXCEPT ![n] = [s \in Steps |-> -1]]
            /\ accBal' = [accBal EXCEPT ![n] = [s \in Steps |-> -1]]
            /\ accVal' = [accVal EXCEPT ![n] = [s \in Steps |-> None]]
       ELSE UNCHANGED <<maxBal, accBal, accVal>>
    /\ \E state \in ResumeFrom(n) : params' = [params EXCEPT ![n] = state]
    /\ UNCHANGED <<side, bytes, floor, proposals, commits, faults>>

\* One node cut off from the rest (with N = 3 every split is of this shape).
Partition(group) ==
    /\ faults.partitions < MaxPartitions /\ Cardinality(group) = 1
    /\ \A n \in Nodes : side[n] = 0
    /\ group # {} /\ group # Nodes
    /\ side' = [n \in Nodes |-> IF n \in group THEN 1 ELSE 0]
    /\ faults' = [faults EXCEPT !.partitions = @ + 1]
    /\ UNCHANGED <<up, maxBal, accBal, accVal, bytes, params, floor, proposals, commits>>

Heal ==
    /\ \E n \in Nodes : side[n] = 1
    /\ side' = [n \in Nodes |-> 0]
    /\ UNCHANGED <<up, maxBal, accBal, accVal, bytes, params, floor, proposals, commits, faults>>

-----------------------------------------------------------------------------
\* The ballots of n that some acceptor promised for n's next step.
OwnPromises(n) ==
    IF NextStep(n) \in Steps
    THEN {b \in {maxBal[a][NextStep(n)] : a \in Nodes} : b >= 0 /\ Owner(b) = n}
    ELSE {}

Protocol ==
    \* One acceptor per step: "any set of acceptors at once" (the actions allow it)
    \* reaches the same states, since each acceptor's step is local, but with many
    \* more transitions (measured: twice the time, the same distinct states).
    \/ \E n \in Nodes, a \in Nodes : Promise(n, {a})
    \/ \E n \in Nodes : \E b \in OwnPromises(n) : Propose(n, b)
    \/ \E p \in proposals, a \in Nodes : Accept(p, {a})
    \/ \E p \in proposals, n \in Nodes : Commit(n, p)
    \/ \E n \in Nodes : Learn(n)

Environment ==
    \/ \E n \in Nodes : Crash(n)
    \/ \E n \in Nodes : Restart(n)
    \/ \E group \in SUBSET Nodes : Partition(group)
    \/ Heal

Next == Protocol \/ Environment

\* One weak-fairness condition over all protocol steps: whenever some live node
\* can take a protocol step, some node eventually takes one.  Per node would say
\* the same here, since without faults the protocol takes only finitely many
\* steps (ballots rise only past another node's promise, each acceptor accepts
\* each ballot once, parameters only grow): so eventually no protocol step is
\* enabled at all, for any node.  One condition instead of one per node: TLC's
\* liveness check costs grow with the number of fairness conditions.
Fairness == WF_vars(Protocol)

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Properties. *)

TypeOK ==
    /\ up \in [Nodes -> BOOLEAN]
    /\ floor \in [Nodes -> 0..MaxStep]
    /\ \A n \in Nodes : Len(params[n]) <= MaxStep

\* S1 agreement: replicas that applied step s hold the same parameters for s.
S1 == \A n, m \in Nodes : \A s \in 1..MaxStep :
        (s <= Len(params[n]) /\ s <= Len(params[m])) => params[n][s] = params[m][s]

\* S2 durability: while fewer than a majority have crashed, some live node can
\* still apply every committed step (it holds the committed aggregate's bytes).
S2 == 2 * Cardinality({n \in Nodes : ~up[n]}) < N =>
        \A c \in commits : \E n \in Nodes : up[n] /\ c.value \in bytes[n][c.step]

\* S3 no split brain: every commit rests on a majority of the configured voters.
S3 == \A c \in commits : c.majority

\* Reachability witnesses, not properties: tests/verify/test_tla_specs.py checks
\* that TLC violates them in Commit.floor.cfg, so that profile is known to prune
\* records, raise a floor and restart a node below it (the floor is not vacuous).
NoFloorRaised == \A n \in Nodes : floor[n] = 0
NoneBelowFloor == \A n \in Nodes : NextStep(n) > floor[n]

\* L2 progress: if, from some point on, all nodes are connected and a majority
\* stays up, every live node eventually commits every step.
Stable == (\A n \in Nodes : side[n] = 0) /\ 2 * Cardinality({n \in Nodes : up[n]}) > N
L2 == <>[]Stable => <>(\A n \in Nodes : up[n] => Len(params[n]) = MaxStep)
=============================================================================
