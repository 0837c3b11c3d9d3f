------------------------------ MODULE Detector ------------------------------
(***************************************************************************)
(* Failure detection with suspicion, incarnations, refutation and          *)
(* confirmation (SWIM-style), in discrete time.  Mirrors the detector      *)
(* core: heartbeats every HeartbeatPeriod ticks; a peer silent for more    *)
(* than SuspectAfter ticks is suspected (the suspicion is sent to it); a   *)
(* suspected node refutes by raising its incarnation; a suspicion that     *)
(* stands ConfirmAfter ticks without a refutation confirms the peer dead.  *)
(* (View epochs are modelled in Membership.tla.)                          *)
(*                                                                         *)
(* Time: one Tick is one unit; a message within the envelope is delivered  *)
(* within MaxDelay ticks (Tick is disabled while a message is due), and a  *)
(* live process handles every due event before the next Tick (Δ_proc = 1). *)
(* Environment: Crash, Restart (a new incarnation), Lose (a message lost:  *)
(* the link between its two ends leaves the envelope) and Isolate/Heal (a  *)
(* partition cutting one node off: heartbeats across it are dropped, other *)
(* messages are held, as the node's TCP send queues hold them, and arrive  *)
(* after the heal).  S4 is judged per pair, as the S4 checker judges every *)
(* declaration on its own: n may hold a live p dead only if the link       *)
(* between n and p left the envelope (a loss or a cut) during the run.     *)
(*                                                                         *)
(* Verdicts and their provenance (detector.py, "Verdicts formed where the  *)
(* subject could not be heard"): a suspicion is sent to the subject (it    *)
(* refutes) and, as a vote, to the other nodes; a node that suspects p and *)
(* receives another's vote confirms p dead at once, a lone suspicion after *)
(* ConfirmAfter ticks.  A verdict is passed on (a "dead" claim to the      *)
(* others) only when formed with a quorum: by votes, while its node hears  *)
(* a majority.  A receiver drops a claim from a node it holds dead, and    *)
(* one about a peer it hears itself.  The bug "relayed-verdict" is the old *)
(* behaviour: every verdict is passed on and obeyed.                       *)
(*                                                                         *)
(* Fairness (what the implementation assumes): time advances and a live    *)
(* node handles what is due before it does (timers fire on time, messages  *)
(* arrive within Δ): Tick waits for due steps, and one weak fairness       *)
(* condition over protocol steps and Tick.  Crash/Restart/Lose: no         *)
(* fairness.  Bugs (bugs.py names) switch on the known mistakes.           *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    Nodes,            \* node ids
    HeartbeatPeriod,  \* ticks between two heartbeats of a node
    MaxDelay,         \* Δ: ticks within which the envelope delivers a message
    SuspectAfter,     \* silence (ticks) after which a peer is suspected
    ConfirmAfter,     \* ticks an unrefuted suspicion stands before "dead"
    MaxCrashes,       \* crashes the environment may inject
    AllowLoss,        \* may the environment lose messages (leave the envelope)?
    MaxIncarnation,   \* bound on incarnations (state constraint, for TLC only)
    MaxCuts,          \* partitions (one node isolated, then healed) the environment may inject
    Isolable,         \* the nodes a partition may isolate (one suffices: nodes are alike)
    Horizon,          \* ticks explored (0: unbounded); for TLC only, see Bounds
    InstantBeats,     \* heartbeats arrive in the tick they are sent (no hb messages)
    Bugs              \* switched-on known bugs, by their bugs.py names (and spec-only mutants)

ASSUME HeartbeatPeriod >= 1 /\ MaxDelay >= 1 /\ SuspectAfter >= HeartbeatPeriod
\* "relayed-verdict" is a spec-only mutant (verify/tla_catalog.py, SPEC_MUTANTS): the
\* detector before the verdict-provenance rule.
ASSUME Bugs \subseteq {"eager-dead", "no-refute", "relayed-verdict"}

VARIABLES
    up,        \* up[n]: the process runs
    inc,       \* inc[n]: n's own incarnation (persisted across restarts)
    bornInc,   \* bornInc[n]: first incarnation of n's current life (ghost)
    beatIn,    \* beatIn[n]: ticks until n's next heartbeat
    silence,   \* silence[n][p]: ticks since n last heard p (capped)
    view,      \* view[n][p]: [status, inc, age] n's opinion of p
    msgs,      \* in flight: [type |-> "hb"|"suspect", from, to, inc, age]
    crashes,   \* crashes injected so far
    disturbed, \* disturbed[n][p]: a message between n and p was lost or cut (ghost)
    isolated,  \* the node cut off from the others ({} when none)
    cuts,      \* partitions injected so far
    verdict,   \* verdict[n][p]: "none", "local" or "quorum" (how n came to hold p dead)
    now        \* ticks so far, capped at Horizon (ghost, for the bound only)

vars == <<up, inc, bornInc, beatIn, silence, view, msgs, crashes, disturbed, isolated, cuts, verdict, now>>

Bug(name) == name \in Bugs
Cap(x, c) == IF x > c THEN c ELSE x
SilenceCap == SuspectAfter + 1
Peers(n) == Nodes \ {n}

Alive(n) == {p \in Peers(n) : view[n][p].status # "dead"}

Cut(a, b) == (a \in isolated) # (b \in isolated)

\* n hears a majority: itself and the peers it neither holds dead nor suspects.
InQuorum(n) == 2 * Cardinality({n} \cup {q \in Peers(n) : view[n][q].status = "alive"})
                 > Cardinality(Nodes)

\* n's own fresh evidence that p lives: not suspected, heard within SuspectAfter.
Hears(n, p) == view[n][p].status = "alive" /\ silence[n][p] <= SuspectAfter

\* Dead claims n sends about p (to everyone but p) when it confirms p with this verdict.
Claims(n, p, v) ==
    IF v = "quorum" \/ Bug("relayed-verdict")
    THEN {[type |-> "dead", from |-> n, to |-> q, subj |-> p, inc |-> view[n][p].inc, age |-> 0]
            : q \in Peers(n) \ {p}}
    ELSE {}

Init ==
    /\ up = [n \in Nodes |-> TRUE]
    /\ inc = [n \in Nodes |-> 0]
    /\ bornInc = [n \in Nodes |-> 0]
    /\ beatIn = [n \in Nodes |-> 0]
    /\ silence = [n \in Nodes |-> [p \in Nodes |-> 0]]
    /\ view = [n \in Nodes |-> [p \in Nodes |-> [status |-> "alive", inc |-> 0, age |-> 0]]]
    /\ msgs = {}
    /\ crashes = 0
    /\ disturbed = [n \in Nodes |-> [p \in Nodes |-> FALSE]]
    /\ isolated = {}
    /\ cuts = 0
    /\ verdict = [n \in Nodes |-> [p \in Nodes |-> "none"]]
    /\ now = 0

-----------------------------------------------------------------------------
(* Protocol steps of a live node. *)

\* With InstantBeats (partition profiles) a heartbeat is heard by every live peer
\* not cut off at once, as ReceiveHeartbeat would: delay 0 is inside the
\* envelope, and three nodes' heartbeat messages in flight are otherwise too many
\* interleavings for TLC.
HeardNow(q, n) == up[q] /\ q # n /\ ~Cut(n, q)
Refreshes(q, n) == HeardNow(q, n) /\ inc[n] > view[q][n].inc
                   /\ ~(Bug("no-refute") /\ view[q][n].status = "suspect")

Heartbeat(n) ==
    /\ up[n] /\ beatIn[n] = 0
    /\ beatIn' = [beatIn EXCEPT ![n] = HeartbeatPeriod]
    /\ IF InstantBeats
       THEN /\ silence' = [q \in Nodes |-> [p \in Nodes |->
                             IF p = n /\ HeardNow(q, n) /\ inc[n] >= view[q][n].inc
                             THEN 0 ELSE silence[q][p]]]
            /\ view' = [q \in Nodes |-> [p \in Nodes |->
                          IF p = n /\ Refreshes(q, n)
                          THEN [status |-> "alive", inc |-> inc[n], age |-> 0]
                          ELSE view[q][p]]]
            /\ verdict' = [q \in Nodes |-> [p \in Nodes |->
                             IF p = n /\ Refreshes(q, n) THEN "none" ELSE verdict[q][p]]]
            /\ UNCHANGED msgs
       ELSE /\ msgs' = msgs \cup {[type |-> "hb", from |-> n, to |-> p, inc |-> inc[n], age |-> 0]
                                   : p \in {q \in Peers(n) : ~Cut(n, q)}}
            /\ UNCHANGED <<silence, view, verdict>>
    /\ UNCHANGED <<up, inc, bornInc, crashes, disturbed, isolated, cuts, now>>

\* n hears p's heartbeat at incarnation i.  A higher incarnation clears a
\* suspicion or a death (a refutation, or p restarted); the same incarnation
\* only resets the silence: a suspicion at i stands until p refutes (SWIM).
ReceiveHeartbeat(m) ==
    LET n == m.to
        p == m.from
        known == view[n][p]
        refutes == m.inc > known.inc
        ignored == Bug("no-refute") /\ known.status = "suspect"
        newEntry == IF refutes /\ ~ignored
                    THEN [status |-> "alive", inc |-> m.inc, age |-> 0]
                    ELSE known
        newView == [view[n] EXCEPT ![p] = newEntry]
    IN  /\ m \in msgs /\ m.type = "hb" /\ up[n] /\ ~Cut(m.from, m.to)
        /\ msgs' = msgs \ {m}
        /\ silence' = IF m.inc >= known.inc
                      THEN [silence EXCEPT ![n][p] = 0] ELSE silence
        /\ view' = [view EXCEPT ![n] = newView]
        /\ verdict' = IF refutes /\ ~ignored THEN [verdict EXCEPT ![n][p] = "none"] ELSE verdict
        /\ UNCHANGED <<up, inc, bornInc, beatIn, crashes, disturbed, isolated, cuts, now>>

\* p learns it is suspected at its current incarnation: it refutes by raising
\* the incarnation and announcing it at once.
ReceiveSuspicion(m) ==
    LET p == m.to IN
    /\ m \in msgs /\ m.type = "suspect" /\ up[p] /\ ~Cut(m.from, m.to)
    /\ IF m.inc = inc[p]
       THEN /\ inc' = [inc EXCEPT ![p] = @ + 1]
            /\ IF InstantBeats
               THEN /\ msgs' = msgs \ {m}
                    /\ beatIn' = [beatIn EXCEPT ![p] = 0]  \* announced at once
               ELSE /\ msgs' = (msgs \ {m}) \cup
                         {[type |-> "hb", from |-> p, to |-> q, inc |-> inc[p] + 1, age |-> 0]
                            : q \in {r \in Peers(p) : ~Cut(p, r)}}
                    /\ UNCHANGED beatIn
       ELSE /\ msgs' = msgs \ {m}
            /\ UNCHANGED <<inc, beatIn>>
    /\ UNCHANGED <<up, bornInc, silence, view, crashes, disturbed, isolated, cuts, verdict, now>>

\* Another node's vote that m.subj is suspect: a node that suspects it too at
\* that incarnation confirms it dead at once (two monitors agree), a verdict
\* with a quorum when this node hears a majority.  A vote from a node held dead
\* (cut off when it formed it) or about a peer not suspected here is dropped.
ReceiveVote(m) ==
    LET n == m.to
        p == m.subj
        v == IF InQuorum(n) THEN "quorum" ELSE "local"
        counts == /\ view[n][m.from].status # "dead"
                  /\ view[n][p].status = "suspect" /\ view[n][p].inc = m.inc
    IN  /\ m \in msgs /\ m.type = "vote" /\ up[n] /\ ~Cut(m.from, m.to)
        /\ IF counts
           THEN /\ view' = [view EXCEPT ![n][p] = [@ EXCEPT !.status = "dead", !.age = 0]]
                /\ verdict' = [verdict EXCEPT ![n][p] = v]
                /\ msgs' = (msgs \ {m}) \cup Claims(n, p, v)
           ELSE /\ msgs' = msgs \ {m}
                /\ UNCHANGED <<view, verdict>>
        /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, crashes, disturbed, isolated, cuts, now>>

\* Another node's verdict that m.subj is dead.  Dropped when it comes from a node
\* held dead, or (unless relayed-verdict) when this node hears the subject itself;
\* otherwise obeyed (the verdict is this node's now; it is not passed on again).
ReceiveDead(m) ==
    LET n == m.to
        p == m.subj
        obeyed == /\ view[n][m.from].status # "dead"
                  /\ view[n][p].status # "dead" /\ view[n][p].inc = m.inc
                  /\ (Bug("relayed-verdict") \/ ~Hears(n, p))
    IN  /\ m \in msgs /\ m.type = "dead" /\ up[n] /\ ~Cut(m.from, m.to)
        /\ msgs' = msgs \ {m}
        /\ IF obeyed
           THEN /\ view' = [view EXCEPT ![n][p] = [@ EXCEPT !.status = "dead", !.age = 0]]
                /\ verdict' = [verdict EXCEPT ![n][p] = IF InQuorum(n) THEN "quorum" ELSE "local"]
           ELSE UNCHANGED <<view, verdict>>
        /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, crashes, disturbed, isolated, cuts, now>>

\* Deliveries to a stopped process vanish (the socket is gone).
DropAtStopped(m) ==
    /\ m \in msgs /\ ~up[m.to] /\ ~Cut(m.from, m.to)
    /\ msgs' = msgs \ {m}
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, view, crashes, disturbed, isolated, cuts, verdict, now>>

\* The timers: both fire as soon as they are due (see Tick).
SuspectDue(n, p) ==
    /\ up[n] /\ n # p
    /\ view[n][p].status = "alive"
    \* eager-dead's threshold: the first missed heartbeat
    /\ silence[n][p] > IF Bug("eager-dead") THEN HeartbeatPeriod ELSE SuspectAfter
ConfirmDue(n, p) ==
    /\ up[n] /\ n # p
    /\ view[n][p].status = "suspect" /\ view[n][p].age >= ConfirmAfter

\* A suspicion goes to the subject (so it can refute) and, as a vote, to the others.
Suspect(n, p) ==
    /\ SuspectDue(n, p)
    /\ IF Bug("eager-dead")
       THEN \* the mistake: dead at once, no suspicion phase
            /\ LET newView == [view[n] EXCEPT ![p] = [@ EXCEPT !.status = "dead", !.age = 0]]
               IN /\ view' = [view EXCEPT ![n] = newView]
            /\ verdict' = [verdict EXCEPT ![n][p] = "local"]
            /\ UNCHANGED msgs
       ELSE /\ view' = [view EXCEPT ![n][p] = [@ EXCEPT !.status = "suspect", !.age = 0]]
            /\ msgs' = msgs \cup {[type |-> "suspect", from |-> n, to |-> p, inc |-> view[n][p].inc, age |-> 0]}
                            \cup {[type |-> "vote", from |-> n, to |-> q, subj |-> p, inc |-> view[n][p].inc, age |-> 0]
                                    : q \in Peers(n) \ {p}}
            /\ UNCHANGED verdict
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, crashes, disturbed, isolated, cuts, now>>

\* A lone suspicion that stood ConfirmAfter ticks: a verdict without a quorum
\* (one monitor's word), acted on here, passed on only under relayed-verdict.
Confirm(n, p) ==
    /\ ConfirmDue(n, p)
    /\ LET newView == [view[n] EXCEPT ![p] = [@ EXCEPT !.status = "dead", !.age = 0]]
       IN /\ view' = [view EXCEPT ![n] = newView]
    /\ verdict' = [verdict EXCEPT ![n][p] = "local"]
    /\ msgs' = msgs \cup Claims(n, p, "local")
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, crashes, disturbed, isolated, cuts, now>>

\* Timers fire on time: a suspicion or confirmation that is due is taken before
\* the clock moves on (Δ_proc = 1 tick).
Due == \E n, p \in Nodes : SuspectDue(n, p) \/ ConfirmDue(n, p)

\* One unit of time.  Disabled while a live node owes a heartbeat, a message is
\* due (age = MaxDelay: the bounded-delay envelope; a message held by a cut waits
\* for the heal) or a timer is due.
Tick ==
    /\ \A n \in Nodes : up[n] => beatIn[n] > 0
    /\ \A m \in msgs : m.age < MaxDelay \/ Cut(m.from, m.to)
    /\ ~Due
    /\ beatIn' = [n \in Nodes |-> IF up[n] THEN beatIn[n] - 1 ELSE beatIn[n]]
    \* Only what a rule reads is counted (silence of live-viewed peers, age of
    \* suspicions), which keeps the state space small without losing behaviours.
    /\ silence' = [n \in Nodes |-> [p \in Nodes |->
                     IF n # p /\ view[n][p].status = "alive"
                     THEN Cap(silence[n][p] + 1, SilenceCap) ELSE 0]]
    /\ view' = [n \in Nodes |-> [p \in Nodes |->
                   IF view[n][p].status = "suspect"
                   THEN [view[n][p] EXCEPT !.age = Cap(@ + 1, ConfirmAfter)]
                   ELSE view[n][p]]]
    /\ msgs' = {IF Cut(m.from, m.to) THEN m ELSE [m EXCEPT !.age = @ + 1] : m \in msgs}
    /\ now' = IF now < Horizon THEN now + 1 ELSE now
    /\ UNCHANGED <<up, inc, bornInc, crashes, disturbed, isolated, cuts, verdict>>

-----------------------------------------------------------------------------
(* Environment. *)

Crash(n) ==
    /\ up[n] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![n] = FALSE]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<inc, bornInc, beatIn, silence, view, msgs, disturbed, isolated, cuts, verdict, now>>

\* A restart is a new life with a new incarnation and a fresh view.
Restart(n) ==
    /\ ~up[n]
    /\ up' = [up EXCEPT ![n] = TRUE]
    /\ inc' = [inc EXCEPT ![n] = @ + 1]
    /\ bornInc' = [bornInc EXCEPT ![n] = inc[n] + 1]
    /\ beatIn' = [beatIn EXCEPT ![n] = 0]
    /\ silence' = [silence EXCEPT ![n] = [p \in Nodes |-> 0]]
    /\ view' = [view EXCEPT ![n] = [p \in Nodes |-> [view[n][p] EXCEPT !.status = "alive", !.age = 0]]]
    /\ verdict' = [verdict EXCEPT ![n] = [p \in Nodes |-> "none"]]
    /\ UNCHANGED <<msgs, crashes, disturbed, isolated, cuts, now>>

Lose(m) ==
    /\ AllowLoss /\ m \in msgs
    /\ msgs' = msgs \ {m}
    /\ disturbed' = [disturbed EXCEPT ![m.from][m.to] = TRUE, ![m.to][m.from] = TRUE]
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, view, crashes, isolated, cuts, verdict, now>>

\* One node is cut off from all others; heartbeats in flight across the cut are
\* lost, everything else is held until the heal.
Isolate(n) ==
    /\ isolated = {} /\ cuts < MaxCuts /\ n \in Isolable
    /\ isolated' = {n}
    /\ cuts' = cuts + 1
    /\ msgs' = {m \in msgs : ~(m.type = "hb" /\ (m.from = n \/ m.to = n))}
    /\ disturbed' = [a \in Nodes |-> [b \in Nodes |->
                        disturbed[a][b] \/ (a # b /\ (a = n \/ b = n))]]
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, view, crashes, verdict, now>>

Heal ==
    /\ isolated # {}
    /\ isolated' = {}
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, view, msgs, crashes, disturbed, cuts, verdict, now>>

-----------------------------------------------------------------------------
Protocol ==
    \/ \E n \in Nodes : Heartbeat(n)
    \/ \E m \in msgs : ReceiveHeartbeat(m)
    \/ \E m \in msgs : ReceiveSuspicion(m)
    \/ \E m \in msgs : ReceiveVote(m)
    \/ \E m \in msgs : ReceiveDead(m)
    \/ \E m \in msgs : DropAtStopped(m)
    \/ \E n, p \in Nodes : Suspect(n, p)
    \/ \E n, p \in Nodes : Confirm(n, p)

Environment ==
    \/ \E n \in Nodes : Crash(n)
    \/ \E n \in Nodes : Restart(n)
    \/ \E m \in msgs : Lose(m)
    \/ \E n \in Nodes : Isolate(n)
    \/ Heal

Next == Protocol \/ Tick \/ Environment

\* One condition: whenever the protocol or the clock can move, something moves.
\* That is enough because Tick is disabled while anything is due (a heartbeat,
\* a message at its delay bound, a timer), so what is due is done before time
\* advances, and between two Ticks only finitely many protocol steps fit.
\* (One condition instead of one per action and pair: TLC's liveness check
\* costs grow with the number of fairness conditions.)
Fairness == WF_vars(Protocol \/ Tick)

Spec == Init /\ [][Next]_vars /\ Fairness

\* For TLC only: incarnations rise without bound in an infinite run; with a
\* Horizon, behaviours are explored up to that many ticks (a partition profile's
\* interleavings of three nodes' messages are otherwise too many for CI).
Bounds == /\ \A n \in Nodes : inc[n] <= MaxIncarnation
          /\ Horizon = 0 \/ now < Horizon

\* For TLC only (partition profiles): the cut comes in the first ticks; a later cut
\* is the same behaviour shifted in time, once heartbeats are flowing.
EarlyCut == cuts = 0 => now <= 2

-----------------------------------------------------------------------------
(* Properties. *)

TypeOK ==
    /\ up \in [Nodes -> BOOLEAN]
    /\ \A n, p \in Nodes : view[n][p].status \in {"alive", "suspect", "dead"}
    /\ \A n, p \in Nodes : verdict[n][p] \in {"none", "local", "quorum"}
    /\ \A n, p \in Nodes : (verdict[n][p] # "none") => view[n][p].status = "dead"

\* S4 detector accuracy, judged per declaration: n holds p dead at an incarnation
\* of a life that is still running only if the link between n and p left the
\* envelope (a message between them lost, or a cut between them).  A verdict
\* formed elsewhere, across a cut that did not separate n from p, never kills p
\* in n's view.
S4 == \A n, p \in Nodes :
        (n # p /\ view[n][p].status = "dead" /\ up[p] /\ view[n][p].inc >= bornInc[p])
            => disturbed[n][p]

\* L1 completeness: a crashed node is eventually declared dead by every node
\* that stays up (the bound D is the number of Ticks: SuspectAfter + ConfirmAfter + MaxDelay).
L1 == \A n, p \in Nodes :
        n # p => (~up[p] ~> (view[n][p].status = "dead" \/ ~up[n] \/ up[p]))
=============================================================================
