------------------------------- MODULE Rejoin -------------------------------
(***************************************************************************)
(* Rejoin after a restart: state transfer from a live peer, the local      *)
(* checkpoint as fallback, a torn/corrupted checkpoint skipped.  Mirrors   *)
(* the rejoin core's events: checkpoint_write, checkpoint_skip,            *)
(* rejoin_begin, rejoin_done, and commit (abstracted: Commit.tla verifies  *)
(* agreement, here a majority of synced nodes simply applies the next     *)
(* step's value).  params[n] is the sequence of step values n applied: two *)
(* replicas hold the same fingerprint at a step iff the sequences agree.  *)
(* A rejoining node is a non-voting learner until it is synced.           *)
(*                                                                         *)
(* Fairness (what the implementation assumes, for L3): a rejoining node   *)
(* with a live synced peer eventually completes the transfer, and a synced *)
(* node eventually learns steps its peers committed (WF); the environment *)
(* (Crash, Restart, Corrupt) has none and is bounded by MaxCrashes.       *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    N,            \* nodes, named 1..N
    MaxStep,      \* steps to commit
    MaxCrashes,   \* crashes (and checkpoint corruptions) the environment may inject
    Bugs          \* switched-on known bugs, by their bugs.py names

ASSUME Bugs \subseteq {"stale-rejoin"}

Nodes == 1..N
Bug(name) == name \in Bugs
StepValue(s) == s   \* the committed aggregate of step s (agreed: see Commit.tla)

VARIABLES
    up,          \* up[n]: the process runs
    mode,        \* mode[n]: "synced" | "rejoining" | "down"
    step,        \* step[n]: the step n claims to be at
    params,      \* params[n]: the values n's parameters were built from
    checkpoint,  \* checkpoint[n]: [params, ok] on n's disk (survives crashes)
    faults       \* crashes and corruptions injected so far

vars == <<up, mode, step, params, checkpoint, faults>>

Synced(n) == up[n] /\ mode[n] = "synced"
Top == IF \E n \in Nodes : Synced(n)
       THEN CHOOSE k \in {step[n] : n \in Nodes} :
              /\ \E n \in Nodes : Synced(n) /\ step[n] = k
              /\ \A n \in Nodes : Synced(n) => step[n] <= k
       ELSE 0

Init ==
    /\ up = [n \in Nodes |-> TRUE]
    /\ mode = [n \in Nodes |-> "synced"]
    /\ step = [n \in Nodes |-> 0]
    /\ params = [n \in Nodes |-> <<>>]
    /\ checkpoint = [n \in Nodes |-> [params |-> <<>>, ok |-> TRUE]]
    /\ faults = 0

-----------------------------------------------------------------------------
(* Protocol. *)

\* The event "commit": a majority q of synced voters at the top step applies the next step.
CommitStep(q) ==
    /\ 2 * Cardinality(q) > N
    /\ \A n \in q : Synced(n) /\ step[n] = Top
    /\ Top < MaxStep
    /\ step' = [n \in Nodes |-> IF n \in q THEN step[n] + 1 ELSE step[n]]
    /\ params' = [n \in Nodes |-> IF n \in q THEN Append(params[n], StepValue(Top + 1)) ELSE params[n]]
    /\ UNCHANGED <<up, mode, checkpoint, faults>>

\* A synced node that missed a commit learns it from a peer (commit + bytes).
Learn(n, p) ==
    /\ Synced(n) /\ Synced(p) /\ step[n] < step[p]
    /\ step' = [step EXCEPT ![n] = @ + 1]
    /\ params' = [params EXCEPT ![n] = Append(@, params[p][step[n] + 1])]
    /\ UNCHANGED <<up, mode, checkpoint, faults>>

\* The event "checkpoint_write".
WriteCheckpoint(n) ==
    /\ Synced(n) /\ checkpoint[n] # [params |-> params[n], ok |-> TRUE]
    /\ checkpoint' = [checkpoint EXCEPT ![n] = [params |-> params[n], ok |-> TRUE]]
    /\ UNCHANGED <<up, mode, step, params, faults>>

\* The event "rejoin_done" from a peer: the transferred state is verified
\* against the peer's fingerprint, so n ends with the peer's parameters.
TransferFrom(n, p) ==
    /\ up[n] /\ mode[n] = "rejoining" /\ Synced(p)
    /\ IF Bug("stale-rejoin")
       THEN \* the mistake: jump to the peer's step, keep the stale local parameters
            /\ step' = [step EXCEPT ![n] = step[p]]
            /\ UNCHANGED params
       ELSE /\ step' = [step EXCEPT ![n] = step[p]]
            /\ params' = [params EXCEPT ![n] = params[p]]
    /\ mode' = [mode EXCEPT ![n] = "synced"]
    /\ UNCHANGED <<up, checkpoint, faults>>

\* The event "rejoin_done" with source "checkpoint": no synced peer is up, so the
\* node resumes from what it loaded (its checkpoint, or the initial state).
ResumeAlone(n) ==
    /\ up[n] /\ mode[n] = "rejoining" /\ ~\E p \in Nodes : Synced(p)
    /\ mode' = [mode EXCEPT ![n] = "synced"]
    /\ UNCHANGED <<up, step, params, checkpoint, faults>>

-----------------------------------------------------------------------------
(* Environment. *)

Crash(n) ==
    /\ up[n] /\ faults < MaxCrashes
    /\ up' = [up EXCEPT ![n] = FALSE]
    /\ mode' = [mode EXCEPT ![n] = "down"]
    /\ faults' = faults + 1
    /\ UNCHANGED <<step, params, checkpoint>>

\* The events "start" then "rejoin_begin": memory is gone; the process loads its
\* checkpoint, or skips a corrupted one ("checkpoint_skip") and starts from scratch.
Restart(n) ==
    /\ ~up[n]
    /\ up' = [up EXCEPT ![n] = TRUE]
    /\ mode' = [mode EXCEPT ![n] = "rejoining"]
    /\ params' = [params EXCEPT ![n] = IF checkpoint[n].ok THEN checkpoint[n].params ELSE <<>>]
    /\ step' = [step EXCEPT ![n] = IF checkpoint[n].ok THEN Len(checkpoint[n].params) ELSE 0]
    /\ UNCHANGED <<checkpoint, faults>>

CorruptCheckpoint(n) ==
    /\ ~up[n] /\ checkpoint[n].ok /\ faults < MaxCrashes
    /\ checkpoint' = [checkpoint EXCEPT ![n].ok = FALSE]
    /\ faults' = faults + 1
    /\ UNCHANGED <<up, mode, step, params>>

-----------------------------------------------------------------------------
Next ==
    \/ \E q \in SUBSET Nodes : CommitStep(q)
    \/ \E n, p \in Nodes : Learn(n, p)
    \/ \E n, p \in Nodes : TransferFrom(n, p)
    \/ \E n \in Nodes : WriteCheckpoint(n)
    \/ \E n \in Nodes : ResumeAlone(n)
    \/ \E n \in Nodes : Crash(n)
    \/ \E n \in Nodes : Restart(n)
    \/ \E n \in Nodes : CorruptCheckpoint(n)

\* One weak-fairness condition over every node's catch-up steps.  Per node
\* (as the module header says) is the same here: without faults the catch-up
\* steps are finitely many (each moves a node's step up or ends its rejoin), so
\* eventually none is enabled for any node.  One condition instead of nine:
\* TLC's liveness check costs grow with the number of fairness conditions.
CatchUp == \E n, p \in Nodes : TransferFrom(n, p) \/ Learn(n, p) \/ ResumeAlone(n)
Fairness == WF_vars(CatchUp)

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Properties. *)

TypeOK ==
    /\ mode \in [Nodes -> {"synced", "rejoining", "down"}]
    /\ \A n \in Nodes : step[n] <= MaxStep

\* S1 agreement: live synced replicas at the same step hold identical parameters.
S1 == \A n, m \in Nodes :
        (Synced(n) /\ Synced(m) /\ step[n] = step[m]) => params[n] = params[m]

\* L3 rejoin: a restarted node that stays up is eventually synced and holds
\* the parameters of every synced peer at its step or behind.
CaughtUp(n) == Synced(n) /\ \A p \in Nodes : (Synced(p) /\ step[p] <= step[n])
                              => params[p] = SubSeq(params[n], 1, step[p])
L3 == \A n \in Nodes : (mode[n] = "rejoining") ~> (~up[n] \/ CaughtUp(n))
=============================================================================
