----------------------------- MODULE Membership -----------------------------
(***************************************************************************)
(* Membership: the configured voters and learners, and each node's view   *)
(* with its epoch.  Mirrors the membership core and the view part of the  *)
(* detector core:                                                          *)
(*   - the configuration changes only through committed steps, one node   *)
(*     at a time (Raft's single-server changes): add (absent -> learner),  *)
(*     promote (learner -> voter, once caught up), remove (leave).  A      *)
(*     change commits with a majority of the voters before it (the commit *)
(*     itself is Commit.tla's business) and takes effect for the next step;*)
(*   - a crashed or dead-declared node stays a member until a committed    *)
(*     remove;                                                             *)
(*   - the view is separate from the configuration: each node's detector   *)
(*     view holds every peer as alive or dead at an incarnation, and its   *)
(*     epoch rises by one with every change of the view;                   *)
(*   - a node declared dead at incarnation i (its declarer tells it) must  *)
(*     come back with a higher incarnation; a declarer takes a peer back   *)
(*     into its view only above the incarnation it declared dead, and      *)
(*     rejects a join at or below it.                                      *)
(* Declarations here may be wrong (a live node cut off or slow): whether  *)
(* they are accurate is Detector.tla's S4; this module checks what the     *)
(* membership does with them.  Events: config_change, view_change,         *)
(* declare_dead (peer = self: MustRejoin), declare_alive, start.           *)
(*                                                                         *)
(* Environment: Crash, Restart (a new incarnation), wrong declarations.   *)
(* Fairness (for MembershipLive): a requested change is eventually        *)
(* committed while a majority of the voters is up, and a learner that is  *)
(* up eventually catches up (WF); the environment has none and is bounded. *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS
    Nodes,           \* every node id that may ever take part
    InitialVoters,   \* the voters of the first configuration
    MaxChanges,      \* committed configuration changes (TLC bound)
    MaxCrashes,      \* crashes the environment may inject
    MaxDeclarations, \* death declarations (right or wrong) the detector may make
    MaxIncarnation   \* bound on incarnations (state constraint, for TLC only)

ASSUME InitialVoters \subseteq Nodes /\ InitialVoters # {}

None == [change |-> "none", peer |-> 0]
\* The membership core's ROLE_TRANSITIONS.
Role(p, vs, ls) == IF p \in vs THEN "voter" ELSE IF p \in ls THEN "learner" ELSE "absent"
NewRole(role, change) ==
    CASE role = "absent" /\ change = "add" -> "learner"
      [] role = "learner" /\ change = "promote" -> "voter"
      [] role \in {"learner", "voter"} /\ change = "remove" -> "absent"
      [] OTHER -> "invalid"

VARIABLES
    up,          \* up[n]: the process runs
    inc,         \* inc[n]: n's incarnation (persisted; rises on restart and rejoin)
    voters,      \* the committed configuration's voters
    learners,    \* ... and its non-voting learners
    prevVoters,  \* ghost: the voters before the last committed change
    pending,     \* the change asked for (join, leave, caught up), not yet committed:
                 \* the head of the core's queue (None: none)
    view,        \* view[n][p]: [alive |-> BOOLEAN, inc |-> incarnation]
    epoch,       \* epoch[n]: n's view epoch (a new process counts anew)
    dead,        \* dead[n][p]: the highest incarnation n declared p dead at (-1)
    changes,     \* committed configuration changes so far
    crashes,     \* crashes injected so far
    decls        \* death declarations made so far

vars == <<up, inc, voters, learners, prevVoters, pending, view, epoch, dead, changes, crashes,
          decls>>

Members == voters \cup learners
Majority(set) == {q \in SUBSET set : 2 * Cardinality(q) > Cardinality(set)}

Init ==
    /\ up = [n \in Nodes |-> TRUE]
    /\ inc = [n \in Nodes |-> 0]
    /\ voters = InitialVoters
    /\ learners = {}
    /\ prevVoters = InitialVoters
    /\ pending = None
    /\ view = [n \in Nodes |-> [p \in Nodes |-> [alive |-> TRUE, inc |-> 0]]]
    /\ epoch = [n \in Nodes |-> 0]
    /\ dead = [n \in Nodes |-> [p \in Nodes |-> -1]]
    /\ changes = 0
    /\ crashes = 0
    /\ decls = 0

-----------------------------------------------------------------------------
(* Requests: what the membership core queues with _want. *)

\* JoinRequested at a live member v: rejected (JoinRejected) at or below the
\* incarnation v declared p dead at; otherwise an add is queued.
RequestJoin(p, v) ==
    /\ up[p] /\ up[v] /\ v \in Members /\ p # v
    /\ Role(p, voters, learners) = "absent"
    /\ inc[p] > dead[v][p]
    /\ pending = None
    /\ pending' = [change |-> "add", peer |-> p]
    /\ UNCHANGED <<up, inc, voters, learners, prevVoters, view, epoch, dead, changes, crashes, decls>>

\* LeaveRequested: a member asks to be removed (it keeps serving until then).
RequestLeave(p) ==
    /\ up[p] /\ p \in Members
    /\ pending = None
    /\ pending' = [change |-> "remove", peer |-> p]
    /\ UNCHANGED <<up, inc, voters, learners, prevVoters, view, epoch, dead, changes, crashes, decls>>

\* LearnerCaughtUp: the learner reached the cluster's step (Rejoin.tla's L3).
CaughtUp(p) ==
    /\ up[p] /\ p \in learners
    /\ pending = None
    /\ pending' = [change |-> "promote", peer |-> p]
    /\ UNCHANGED <<up, inc, voters, learners, prevVoters, view, epoch, dead, changes, crashes, decls>>

\* A change still valid for the current configuration (change_for_next_step):
\* its role transition exists and it does not remove the last voter.
Valid(c) ==
    /\ NewRole(Role(c.peer, voters, learners), c.change) # "invalid"
    /\ ~(c.change = "remove" /\ voters = {c.peer})

\* ConfigCommitted: one change per committed step, acknowledged by a majority
\* of the voters before it (so consecutive configurations share a voter in
\* every pair of majorities); changes no longer valid are dropped.
CommitChange(c) ==
    LET role == NewRole(Role(c.peer, voters, learners), c.change)
        others == voters \ {c.peer}
    IN
    /\ c = pending /\ c # None /\ Valid(c) /\ changes < MaxChanges
    /\ {v \in voters : up[v]} \in Majority(voters)
    /\ prevVoters' = voters
    /\ voters' = IF role = "voter" THEN others \cup {c.peer} ELSE others
    /\ learners' = IF role = "learner" THEN (learners \ {c.peer}) \cup {c.peer}
                   ELSE learners \ {c.peer}
    /\ pending' = None
    /\ changes' = changes + 1
    /\ UNCHANGED <<up, inc, view, epoch, dead, crashes, decls>>

\* change_for_next_step drops a queued change that no longer applies.
DropInvalid ==
    /\ pending # None /\ ~Valid(pending)
    /\ pending' = None
    /\ UNCHANGED <<up, inc, voters, learners, prevVoters, view, epoch, dead, changes, crashes, decls>>

-----------------------------------------------------------------------------
(* The view: declarations and their consequences. *)

\* DeclaredDead: n's detector confirms p dead at the incarnation n knows (maybe
\* wrongly: p may be alive but cut off).  The view changes: the epoch rises.
DeclareDead(n, p) ==
    /\ up[n] /\ n # p /\ view[n][p].alive /\ decls < MaxDeclarations
    /\ decls' = decls + 1
    /\ view' = [view EXCEPT ![n][p].alive = FALSE]
    /\ dead' = [dead EXCEPT ![n][p] = view[n][p].inc]
    /\ epoch' = [epoch EXCEPT ![n] = @ + 1]
    /\ UNCHANGED <<up, inc, voters, learners, prevVoters, pending, changes, crashes>>

\* DeclaredAlive: n hears p at a higher incarnation than it knows (a refutation
\* or a new process).  A peer held dead comes back only above the incarnation
\* it was declared dead at.
HearHigher(n, p) ==
    /\ up[n] /\ up[p] /\ n # p /\ inc[p] > view[n][p].inc
    /\ view' = [view EXCEPT ![n][p] = [alive |-> TRUE, inc |-> inc[p]]]
    /\ epoch' = IF view[n][p].alive THEN epoch ELSE [epoch EXCEPT ![n] = @ + 1]
    /\ UNCHANGED <<up, inc, voters, learners, prevVoters, pending, dead, changes, crashes, decls>>

\* SelfDeclaredDead -> MustRejoin: p learns (the declarer tells the dead) that it
\* was declared dead at its current incarnation; it rejoins with a higher one.
\* It stays a member: a death changes the view, not the configuration.
MustRejoin(p) ==
    /\ up[p] /\ \E n \in Nodes : dead[n][p] >= inc[p]
    /\ inc' = [inc EXCEPT ![p] = @ + 1]
    /\ UNCHANGED <<up, voters, learners, prevVoters, pending, view, epoch, dead, changes, crashes, decls>>

-----------------------------------------------------------------------------
(* Environment. *)

Crash(n) ==
    /\ up[n] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![n] = FALSE]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<inc, voters, learners, prevVoters, pending, view, epoch, dead, changes, decls>>

\* A new process: a higher incarnation (persisted), and memory gone: a fresh
\* view at epoch 0 that knows no incarnations and no declarations yet.
Restart(n) ==
    /\ ~up[n]
    /\ up' = [up EXCEPT ![n] = TRUE]
    /\ inc' = [inc EXCEPT ![n] = @ + 1]
    /\ view' = [view EXCEPT ![n] = [p \in Nodes |-> [alive |-> TRUE, inc |-> 0]]]
    /\ dead' = [dead EXCEPT ![n] = [p \in Nodes |-> -1]]
    /\ epoch' = [epoch EXCEPT ![n] = 0]
    /\ UNCHANGED <<voters, learners, prevVoters, pending, changes, crashes, decls>>

-----------------------------------------------------------------------------
Next ==
    \/ \E p, v \in Nodes : RequestJoin(p, v)
    \/ \E p \in Nodes : RequestLeave(p) \/ CaughtUp(p) \/ MustRejoin(p)
    \/ CommitChange(pending)
    \/ DropInvalid
    \/ \E n, p \in Nodes : DeclareDead(n, p) \/ HearHigher(n, p)
    \/ \E n \in Nodes : Crash(n) \/ Restart(n)

Spec == Init /\ [][Next]_vars

\* For TLC only: incarnations rise without bound in an infinite run.
Bounds == \A n \in Nodes : inc[n] <= MaxIncarnation

\* For TLC only: the initial voters are interchangeable (no rule names one), so
\* a config with model values may check safety up to their permutations.
VoterSymmetry == Permutations(InitialVoters)

\* For TLC only: states that differ only in their epochs are one state.  Sound
\* here because no rule reads an epoch (each rule only adds to it), so a
\* state's future does not depend on it; EpochTracksView still checks every
\* epoch change TLC explores.
WithoutEpochs == <<up, inc, voters, learners, prevVoters, pending, view, dead, changes, crashes,
                   decls>>

-----------------------------------------------------------------------------
(* Properties. *)

TypeOK ==
    /\ voters \subseteq Nodes /\ learners \subseteq Nodes
    /\ \A n, p \in Nodes : view[n][p].alive \in BOOLEAN

\* The configuration is well formed: someone votes, nobody is both.
ConfigOK == voters # {} /\ voters \cap learners = {}

\* One node at a time: consecutive voter sets differ in at most one node ...
OneAtATime == Cardinality((prevVoters \ voters) \cup (voters \ prevVoters)) <= 1

\* ... so every majority of the old voters meets every majority of the new
\* ones: a step committed under either configuration is seen by the other (S3).
QuorumsOverlap == \A q1 \in Majority(prevVoters), q2 \in Majority(voters) : q1 \cap q2 # {}

\* No zombie: a view holds a peer alive only above the incarnation it declared
\* that peer dead at, so a dead-declared node takes part again only as a new
\* incarnation (after MustRejoin or a restart).
NoZombie == \A n, p \in Nodes : view[n][p].alive => view[n][p].inc > dead[n][p]

\* The view epoch: within one process life it changes exactly when the view's
\* alive set changes, by one (an action property, checked on every step).
EpochTracksView ==
    [][\A n \in Nodes :
         (up[n] /\ up'[n] /\ inc'[n] = inc[n]) =>
             epoch'[n] = epoch[n] + (IF {p \in Nodes : view'[n][p].alive}
                                        = {p \in Nodes : view[n][p].alive} THEN 0 ELSE 1)]_vars

\* Members leave only through a committed remove: a crash, a restart or a
\* death declaration never changes the configuration.
NoSilentRemoval ==
    [][(voters' # voters \/ learners' # learners) => changes' = changes + 1]_vars
=============================================================================
