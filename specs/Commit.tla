------------------------------- MODULE Commit -------------------------------
(***************************************************************************)
(* Strict-mode step commit: single-decree Paxos per training step, as the *)
(* commit core runs it.  Mirrors the history events: Promise (phase 1b),   *)
(* Propose (phase 2a), Accept (phase 2b), Commit (learn and apply).        *)
(*   - ballots are (round, proposer) pairs, encoded round * N + proposer;  *)
(*   - an acceptor persists its promise and its accept before replying;    *)
(*   - a retry adopts the value of the highest accepted ballot it hears;   *)
(*   - an acceptor accepts only while holding the aggregate's bytes (it    *)
(*     writes them with its accept, so they survive a restart);            *)
(*   - a quorum is a majority of the configured voters, never of the       *)
(*     detector view; the leader of a side is its lowest live node.        *)
(* The value of a step is the aggregate (its fingerprint plus contributor *)
(* set), abstracted to an element of Values; a node's parameters are the   *)
(* sequence of values it applied, so equal sequences = equal fingerprints. *)
(*                                                                         *)
(* Environment: Crash, Restart, Partition (any split into two sides) and   *)
(* Heal.  Proposals live in a set that only grows (loss, delay and      *)
(* duplication are behaviours); promises and accepts are read from the    *)
(* acceptors' persisted state, across sides only while connected.         *)
(*                                                                         *)
(* Fairness (what the implementation assumes, for L2): a live node that   *)
(* can take a protocol step eventually takes one (WF per node); a proposer *)
(* starts a new round only after a fault since its last one (its retry    *)
(* timeout exceeds a fault-free round trip), so rounds are bounded by      *)
(* faults.  KNOWN GAP: a leader rejected by a stale higher ballot of an    *)
(* earlier leader cannot retry until the next fault, so the deep profile   *)
(* finds an L2 counterexample (two crashes); see specs/README.md.  The     *)
(* environment has no fairness but injects finitely many faults          *)
(* (MaxCrashes, MaxPartitions).                                            *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, Sequences

CONSTANTS
    N,              \* number of configured voters, named 1..N
    MaxStep,        \* steps to commit
    MaxCrashes,     \* crashes the environment may inject
    MaxPartitions,  \* partitions the environment may inject
    Bugs            \* switched-on known bugs, by their bugs.py names

ASSUME Bugs \subseteq {"no-quorum", "ack-before-apply", "forget-vote"}

Nodes == 1..N
\* The aggregate each node computes from the gradients it received: node 1 saw
\* a different contributor set from the others, so two values compete and
\* node 1's is held by node 1 alone until someone fetches it.
AggregateOf(n) == IF n = 1 THEN "a" ELSE "b"
Values == {AggregateOf(n) : n \in Nodes}
Steps == 1..MaxStep
MaxRound == MaxCrashes + 2 * MaxPartitions
Ballots == 0..((MaxRound + 1) * N - 1)
Owner(b) == (b % N) + 1
Round(b) == b \div N
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
    proposals,  \* every proposal (phase 2a message) ever sent
    commits,    \* ghost: [step, value, majority] of every commit (majority: its
                \* quorum was a majority of the configured voters)
    faults      \* [crashes, partitions] injected so far

vars == <<up, side, maxBal, accBal, accVal, bytes, params, proposals, commits, faults>>

FaultCount == faults.crashes + faults.partitions
Reachable(a, b) == side[a] = side[b]
View(n) == {m \in Nodes : up[m] /\ Reachable(n, m)}
IsMajorityOf(q, set) == q \subseteq set /\ 2 * Cardinality(q) > Cardinality(set)
\* The mistake no-quorum makes: a majority of the detector view will do.
IsQuorum(q, n) == IF Bug("no-quorum") THEN IsMajorityOf(q, View(n)) /\ q # {}
                  ELSE IsMajorityOf(q, Nodes)
Leader(n) == n = CHOOSE m \in View(n) : \A k \in View(n) : m <= k
NextStep(n) == Len(params[n]) + 1

Init ==
    /\ up = [n \in Nodes |-> TRUE]
    /\ side = [n \in Nodes |-> 0]
    /\ maxBal = [n \in Nodes |-> [s \in Steps |-> -1]]
    /\ accBal = [n \in Nodes |-> [s \in Steps |-> -1]]
    /\ accVal = [n \in Nodes |-> [s \in Steps |-> None]]
    /\ bytes = [n \in Nodes |-> [s \in Steps |-> {AggregateOf(n)}]]
    /\ params = [n \in Nodes |-> <<>>]
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
\* on ballot b (its first round, or a retry after a fault); the acceptors in
\* acc (any non-empty set on its side: the others did not get the request)
\* promise b, persisted before replying.  Promises of several acceptors are
\* taken in one step: each is local to its acceptor, so any interleaving with
\* other steps reaches the same states (a crash before a promise is the
\* behaviour where that acceptor is not in acc).
Promise(n, b, acc) ==
    LET s == NextStep(n) IN
    /\ up[n] /\ Leader(n) /\ Owner(b) = n /\ s \in Steps
    /\ Round(b) = FaultCount
    /\ acc # {}
    /\ \A a \in acc : up[a] /\ Reachable(a, n) /\ b > maxBal[a][s]
    /\ maxBal' = [a \in Nodes |-> IF a \in acc THEN [maxBal[a] EXCEPT ![s] = b] ELSE maxBal[a]]
    /\ UNCHANGED <<up, side, accBal, accVal, bytes, params, proposals, commits, faults>>

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
    /\ up[n] /\ Owner(b) = n /\ s \in Steps
    /\ ~\E p \in proposals : p.step = s /\ p.bal = b
    /\ IsQuorum(q, n)
    /\ proposals' = proposals \cup {[from |-> n, step |-> s, bal |-> b, val |-> v]}
    /\ UNCHANGED <<up, side, maxBal, accBal, accVal, bytes, params, commits, faults>>

\* Phase 2b, the event "accept", by the acceptors in acc (one step, as for
\* promises); persisted before the reply.
CanAccept(a, p) ==
    /\ up[a] /\ Reachable(p.from, a)
    /\ p.bal >= maxBal[a][p.step] /\ accBal[a][p.step] # p.bal
    /\ Bug("ack-before-apply") \/ CanFetch(a, p.step, p.val)
Accept(p, acc) ==
    /\ p \in proposals /\ acc # {}
    /\ \A a \in acc : CanAccept(a, p)
    /\ maxBal' = [a \in Nodes |-> IF a \in acc THEN [maxBal[a] EXCEPT ![p.step] = p.bal] ELSE maxBal[a]]
    /\ accBal' = [a \in Nodes |-> IF a \in acc THEN [accBal[a] EXCEPT ![p.step] = p.bal] ELSE accBal[a]]
    /\ accVal' = [a \in Nodes |-> IF a \in acc THEN [accVal[a] EXCEPT ![p.step] = p.val] ELSE accVal[a]]
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
    /\ UNCHANGED <<up, side, maxBal, accBal, accVal, proposals, faults>>

-----------------------------------------------------------------------------
(* Environment. *)

Crash(n) ==
    /\ up[n] /\ faults.crashes < MaxCrashes
    /\ up' = [up EXCEPT ![n] = FALSE]
    /\ faults' = [faults EXCEPT !.crashes = @ + 1]
    /\ UNCHANGED <<side, maxBal, accBal, accVal, bytes, params, proposals, commits>>

\* A restart keeps what was persisted; forget-vote loses the promise and accept.
Restart(n) ==
    /\ ~up[n]
    /\ up' = [up EXCEPT ![n] = TRUE]
    /\ IF Bug("forget-vote")
       THEN /\ maxBal' = [maxBal EXCEPT ![n] = [s \in Steps |-> -1]]
            /\ accBal' = [accBal EXCEPT ![n] = [s \in Steps |-> -1]]
            /\ accVal' = [accVal EXCEPT ![n] = [s \in Steps |-> None]]
       ELSE UNCHANGED <<maxBal, accBal, accVal>>
    /\ UNCHANGED <<side, bytes, params, proposals, commits, faults>>

\* One node cut off from the rest (with N = 3 every split is of this shape).
Partition(group) ==
    /\ faults.partitions < MaxPartitions /\ Cardinality(group) = 1
    /\ \A n \in Nodes : side[n] = 0
    /\ group # {} /\ group # Nodes
    /\ side' = [n \in Nodes |-> IF n \in group THEN 1 ELSE 0]
    /\ faults' = [faults EXCEPT !.partitions = @ + 1]
    /\ UNCHANGED <<up, maxBal, accBal, accVal, bytes, params, proposals, commits>>

Heal ==
    /\ \E n \in Nodes : side[n] = 1
    /\ side' = [n \in Nodes |-> 0]
    /\ UNCHANGED <<up, maxBal, accBal, accVal, bytes, params, proposals, commits, faults>>

-----------------------------------------------------------------------------
Protocol ==
    \/ \E n \in Nodes, b \in Ballots, acc \in SUBSET Nodes : Promise(n, b, acc)
    \/ \E n \in Nodes, b \in Ballots : Propose(n, b)
    \/ \E p \in proposals, acc \in SUBSET Nodes : Accept(p, acc)
    \/ \E p \in proposals, n \in Nodes : Commit(n, p)

Environment ==
    \/ \E n \in Nodes : Crash(n)
    \/ \E n \in Nodes : Restart(n)
    \/ \E group \in SUBSET Nodes : Partition(group)
    \/ Heal

Next == Protocol \/ Environment

\* One weak-fairness condition per node over all its protocol steps: a live node
\* that can do something eventually does something.  (Per-action conditions say
\* more but cost TLC four times the liveness work; every protocol step moves a
\* finite state forward, so no step can be starved forever by the others.)
NodeSteps(n) ==
    \/ \E b \in Ballots : Propose(n, b) \/ \E q \in SUBSET Nodes : Promise(n, b, q)
    \/ \E p \in proposals : Commit(n, p) \/ Accept(p, {n})

Fairness == \A n \in Nodes : WF_vars(NodeSteps(n))

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Properties. *)

TypeOK ==
    /\ up \in [Nodes -> BOOLEAN]
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

\* L2 progress: if, from some point on, all nodes are connected and a majority
\* stays up, every live node eventually commits every step.
Stable == (\A n \in Nodes : side[n] = 0) /\ 2 * Cardinality({n \in Nodes : up[n]}) > N
L2 == <>[]Stable => <>(\A n \in Nodes : up[n] => Len(params[n]) = MaxStep)
=============================================================================
