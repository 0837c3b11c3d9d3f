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
(* Environment: Crash, Restart (a new incarnation) and Lose (a message     *)
(* lost or cut by a partition: it leaves the envelope, so S4 is no longer  *)
(* demanded, exactly as the S4 checker answers "unknown" outside it).      *)
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
    Bugs              \* switched-on known bugs, by their bugs.py names

ASSUME HeartbeatPeriod >= 1 /\ MaxDelay >= 1 /\ SuspectAfter >= HeartbeatPeriod
ASSUME Bugs \subseteq {"eager-dead", "no-refute"}

VARIABLES
    up,        \* up[n]: the process runs
    inc,       \* inc[n]: n's own incarnation (persisted across restarts)
    bornInc,   \* bornInc[n]: first incarnation of n's current life (ghost)
    beatIn,    \* beatIn[n]: ticks until n's next heartbeat
    silence,   \* silence[n][p]: ticks since n last heard p (capped)
    view,      \* view[n][p]: [status, inc, age] n's opinion of p
    msgs,      \* in flight: [type |-> "hb"|"suspect", from, to, inc, age]
    crashes,   \* crashes injected so far
    lossy      \* TRUE once a message was lost (the run left the envelope)

vars == <<up, inc, bornInc, beatIn, silence, view, msgs, crashes, lossy>>

Bug(name) == name \in Bugs
Cap(x, c) == IF x > c THEN c ELSE x
SilenceCap == SuspectAfter + 1
Peers(n) == Nodes \ {n}

Alive(n) == {p \in Peers(n) : view[n][p].status # "dead"}

Init ==
    /\ up = [n \in Nodes |-> TRUE]
    /\ inc = [n \in Nodes |-> 0]
    /\ bornInc = [n \in Nodes |-> 0]
    /\ beatIn = [n \in Nodes |-> 0]
    /\ silence = [n \in Nodes |-> [p \in Nodes |-> 0]]
    /\ view = [n \in Nodes |-> [p \in Nodes |-> [status |-> "alive", inc |-> 0, age |-> 0]]]
    /\ msgs = {}
    /\ crashes = 0
    /\ lossy = FALSE

-----------------------------------------------------------------------------
(* Protocol steps of a live node. *)

Heartbeat(n) ==
    /\ up[n] /\ beatIn[n] = 0
    /\ msgs' = msgs \cup {[type |-> "hb", from |-> n, to |-> p, inc |-> inc[n], age |-> 0] : p \in Peers(n)}
    /\ beatIn' = [beatIn EXCEPT ![n] = HeartbeatPeriod]
    /\ UNCHANGED <<up, inc, bornInc, silence, view, crashes, lossy>>

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
    IN  /\ m \in msgs /\ m.type = "hb" /\ up[n]
        /\ msgs' = msgs \ {m}
        /\ silence' = IF m.inc >= known.inc
                      THEN [silence EXCEPT ![n][p] = 0] ELSE silence
        /\ view' = [view EXCEPT ![n] = newView]
        /\ UNCHANGED <<up, inc, bornInc, beatIn, crashes, lossy>>

\* p learns it is suspected at its current incarnation: it refutes by raising
\* the incarnation and announcing it at once.
ReceiveSuspicion(m) ==
    LET p == m.to IN
    /\ m \in msgs /\ m.type = "suspect" /\ up[p]
    /\ IF m.inc = inc[p]
       THEN /\ inc' = [inc EXCEPT ![p] = @ + 1]
            /\ msgs' = (msgs \ {m}) \cup
                 {[type |-> "hb", from |-> p, to |-> q, inc |-> inc[p] + 1, age |-> 0] : q \in Peers(p)}
       ELSE /\ msgs' = msgs \ {m}
            /\ UNCHANGED inc
    /\ UNCHANGED <<up, bornInc, beatIn, silence, view, crashes, lossy>>

\* Deliveries to a stopped process vanish (the socket is gone).
DropAtStopped(m) ==
    /\ m \in msgs /\ ~up[m.to]
    /\ msgs' = msgs \ {m}
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, view, crashes, lossy>>

\* The timers: both fire as soon as they are due (see Tick).
SuspectDue(n, p) ==
    /\ up[n] /\ n # p
    /\ view[n][p].status = "alive"
    \* eager-dead's threshold: the first missed heartbeat
    /\ silence[n][p] > IF Bug("eager-dead") THEN HeartbeatPeriod ELSE SuspectAfter
ConfirmDue(n, p) ==
    /\ up[n] /\ n # p
    /\ view[n][p].status = "suspect" /\ view[n][p].age >= ConfirmAfter

Suspect(n, p) ==
    /\ SuspectDue(n, p)
    /\ IF Bug("eager-dead")
       THEN \* the mistake: dead at once, no suspicion phase
            /\ LET newView == [view[n] EXCEPT ![p] = [@ EXCEPT !.status = "dead", !.age = 0]]
               IN /\ view' = [view EXCEPT ![n] = newView]
            /\ UNCHANGED msgs
       ELSE /\ view' = [view EXCEPT ![n][p] = [@ EXCEPT !.status = "suspect", !.age = 0]]
            /\ msgs' = msgs \cup {[type |-> "suspect", from |-> n, to |-> p, inc |-> view[n][p].inc, age |-> 0]}
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, crashes, lossy>>

Confirm(n, p) ==
    /\ ConfirmDue(n, p)
    /\ LET newView == [view[n] EXCEPT ![p] = [@ EXCEPT !.status = "dead", !.age = 0]]
       IN /\ view' = [view EXCEPT ![n] = newView]
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, msgs, crashes, lossy>>

\* Timers fire on time: a suspicion or confirmation that is due is taken before
\* the clock moves on (Δ_proc = 1 tick).
Due == \E n, p \in Nodes : SuspectDue(n, p) \/ ConfirmDue(n, p)

\* One unit of time.  Disabled while a live node owes a heartbeat, a message is
\* due (age = MaxDelay: the bounded-delay envelope) or a timer is due.
Tick ==
    /\ \A n \in Nodes : up[n] => beatIn[n] > 0
    /\ \A m \in msgs : m.age < MaxDelay
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
    /\ msgs' = {[m EXCEPT !.age = @ + 1] : m \in msgs}
    /\ UNCHANGED <<up, inc, bornInc, crashes, lossy>>

-----------------------------------------------------------------------------
(* Environment. *)

Crash(n) ==
    /\ up[n] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![n] = FALSE]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<inc, bornInc, beatIn, silence, view, msgs, lossy>>

\* A restart is a new life with a new incarnation and a fresh view.
Restart(n) ==
    /\ ~up[n]
    /\ up' = [up EXCEPT ![n] = TRUE]
    /\ inc' = [inc EXCEPT ![n] = @ + 1]
    /\ bornInc' = [bornInc EXCEPT ![n] = inc[n] + 1]
    /\ beatIn' = [beatIn EXCEPT ![n] = 0]
    /\ silence' = [silence EXCEPT ![n] = [p \in Nodes |-> 0]]
    /\ view' = [view EXCEPT ![n] = [p \in Nodes |-> [view[n][p] EXCEPT !.status = "alive", !.age = 0]]]
    /\ UNCHANGED <<msgs, crashes, lossy>>

Lose(m) ==
    /\ AllowLoss /\ m \in msgs
    /\ msgs' = msgs \ {m}
    /\ lossy' = TRUE
    /\ UNCHANGED <<up, inc, bornInc, beatIn, silence, view, crashes>>

-----------------------------------------------------------------------------
Protocol ==
    \/ \E n \in Nodes : Heartbeat(n)
    \/ \E m \in msgs : ReceiveHeartbeat(m)
    \/ \E m \in msgs : ReceiveSuspicion(m)
    \/ \E m \in msgs : DropAtStopped(m)
    \/ \E n, p \in Nodes : Suspect(n, p)
    \/ \E n, p \in Nodes : Confirm(n, p)

Environment ==
    \/ \E n \in Nodes : Crash(n)
    \/ \E n \in Nodes : Restart(n)
    \/ \E m \in msgs : Lose(m)

Next == Protocol \/ Tick \/ Environment

\* One condition: whenever the protocol or the clock can move, something moves.
\* That is enough because Tick is disabled while anything is due (a heartbeat,
\* a message at its delay bound, a timer), so what is due is done before time
\* advances, and between two Ticks only finitely many protocol steps fit.
\* (One condition instead of one per action and pair: TLC's liveness check
\* costs grow with the number of fairness conditions.)
Fairness == WF_vars(Protocol \/ Tick)

Spec == Init /\ [][Next]_vars /\ Fairness

\* For TLC only: incarnations rise without bound in an infinite run.
Bounds == \A n \in Nodes : inc[n] <= MaxIncarnation

-----------------------------------------------------------------------------
(* Properties. *)

TypeOK ==
    /\ up \in [Nodes -> BOOLEAN]
    /\ \A n, p \in Nodes : view[n][p].status \in {"alive", "suspect", "dead"}

\* S4 detector accuracy: within the envelope, no node is declared dead at an
\* incarnation of a life that is still running.
S4 == ~lossy =>
        \A n, p \in Nodes :
            (n # p /\ view[n][p].status = "dead" /\ up[p]) => view[n][p].inc < bornInc[p]

\* L1 completeness: a crashed node is eventually declared dead by every node
\* that stays up (the bound D is the number of Ticks: SuspectAfter + ConfirmAfter + MaxDelay).
L1 == \A n, p \in Nodes :
        n # p => (~up[p] ~> (view[n][p].status = "dead" \/ ~up[n] \/ up[p]))
=============================================================================
