/*
 * split.pml: the in-place split of a replicated shard, a Promela model checked
 * with Spin. design/2026-12-07-split-model.md explains it, maps every step to
 * the Go code and lists the properties; design/model/check.sh runs it.
 *
 * Configuration. A parent shard PAR, primary P and replica R, splits into
 * children CA and CB. Two data nodes: node 0 holds P and the child primaries
 * A0, B0 (made on the parent primary's node); node 1 holds R and the child
 * replicas A1, B1. Key 0 lies in CA's range, key 1 in CB's. One coordinator
 * per key writes the values 1..WRITESk in order, each retried until
 * acknowledged; one more coordinator reads key 0 once. Coordinators route by
 * the cluster state they last saw, so it may be stale.
 *
 * The cluster manager (process cm) commits each decision atomically and
 * decides from the committed cluster state alone: a failover loses only its
 * in-memory inbox, and senders re-send. A failure is one task, as in
 * OpenSearch's applyFailedShards: fail the copies, promote, cancel.
 *
 * Strategies: `recover` by default (child replicas by peer recovery from the
 * child primaries); -DLOCAL gives `local` (each parent copy splits at one cut
 * agreed through the cluster state, then replays its own history).
 *
 * Faults, each with a budget, at any step: a node crash (crash-stop,
 * MAXCRASH), the loss of a replication or recovery message (MAXLOSS), a
 * cluster-manager failover (MAXFO).
 *
 * Checked (names as in the design note):
 *   I2  a promotion picks a copy in the shard's committed in-sync set, with a
 *       term strictly greater than any the shard used before;
 *   I3/I4 every acknowledged write is on every live copy in the committed
 *       in-sync set of the shard that owns its key (the parent before the
 *       hand-off record, the child after it): no acknowledged write lost;
 *   I5  every committed cluster state makes exactly one shard search-visible
 *       per key: no search counts a key twice;
 *   I7  the hand-off record gives each child at least as many in-sync copies
 *       as the parent has: the split never narrows redundancy;
 *   R1  a realtime get returns a value no older than the newest value
 *       acknowledged when it is served;
 *   L1  bounded progress: a write ends within MAXATT attempts, and in every
 *       state where nothing can move (the faults may stop at any step) the
 *       split has ended and every write is acknowledged, unless its shard was
 *       left with no in-sync copy;
 *   L2  liveness: `ltl ends`, <> (committed or cancelled), under weak fairness.
 *
 * Mutants (-DMUTANT_...): check.sh --list-mutants.
 */

#ifndef WRITES0
#define WRITES0 1
#endif
#ifndef WRITES1
#define WRITES1 1
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXLOSS
#define MAXLOSS 1
#endif
#ifndef MAXFO
#define MAXFO 1
#endif
/* a write's attempts: each retry waits for its key's routing to change, which
   here happens at most twice (the record, then a promotion or a red shard; or,
   before the record, a promotion or a red shard) */
#ifndef MAXATT
#define MAXATT 3
#endif

/* copies: even ids on node 0, odd on node 1; id / 2 is the shard */
#define cP  0
#define cR  1
#define cA0 2
#define cA1 3
#define cB0 4
#define cB1 5
#define NC  6
#define NOCOPY 6           /* "no primary": arrays indexed by copy have NC+1 slots */
#define NODE(c) ((c) & 1)
#define SH(c) ((c) >> 1)
#define B(c) (1 << (c))
#define PAR 0
#define CA  1
#define CB  2
#define CH(k) ((k) + 1)    /* the child that owns key k */
#define KEY(sh) ((sh) - 1) /* the key a child owns */
#define PCOPIES (B(cP) | B(cR))
#define CCOPIES (B(cA0) | B(cA1) | B(cB0) | B(cB1))
#define CREPLICAS (B(cA1) | B(cB1))
#define COPIES(sh) (3 << (2 * (sh)))
#define HASKEY(c, k) (SH(c) == PAR || KEY(SH(c)) == (k))
#define SEQ(s) (1 << ((s) - 1))   /* the bit of sequence number s, 1..8 */
#define ONES(n) ((1 << (n)) - 1)  /* the bits of 1..n */
#define VAL(c, k) val[2 * (c) + (k)]
#define ALL(b, m) (((b) & (m)) == (m) -> 1 : 0)
/* the local checkpoint of copy c: its run of processed seqs from 1 */
#define LCP(c) (ALL(bits[c], 1) + ALL(bits[c], 3) + ALL(bits[c], 7) + ALL(bits[c], 15) + \
  ALL(bits[c], 31) + ALL(bits[c], 63) + ALL(bits[c], 127) + ALL(bits[c], 255))
#define MIN(a, b) ((a) < (b) -> (a) : (b))
#define KL(c, sh) ((isy[sh] & B(c)) -> LCP(c) : 255)
/* the global checkpoint of a group: the least LCP of its in-sync copies (the
   primary knows each exactly here; a lag would only lower it) */
#define GCP(sh) MIN(MIN(MIN(KL(0, sh), KL(1, sh)), MIN(KL(2, sh), KL(3, sh))), MIN(KL(4, sh), KL(5, sh)))

/* the split in the cluster state */
mtype = { none, splitting, handoff, committed, cancelled };
#define S_NONE      none
#define S_SPLITTING splitting
#define S_HANDOFF   handoff     /* the hand-off record is committed: roll forward only */
#define S_COMMITTED committed
#define S_CANCELLED cancelled   /* cancelled, or refused at the start */
#define RECORDED (st == S_HANDOFF || st == S_COMMITTED)
#define ENDED (st == S_COMMITTED || st == S_CANCELLED)
#define OWNER(k) (RECORDED -> CH(k) : PAR)

/* a copy's role on its node */
#define R_NONE    0
#define R_TRACKED 1   /* a replica: receives its group's operations */
#define R_PRIMARY 2
#define R_HANDOFF 3   /* the parent primary: permits blocked, waiting for the record */
#define R_RETIRED 4   /* the parent primary after the record: refuses, typed */

/* outcomes of one attempt */
#define RES_PENDING 0
#define RES_OK      1
#define RES_FAILED  2   /* no answer, aborted or superseded: wait for a newer state */
#define RES_RETIRED 3   /* the parent refused: it split; retry at the owner */

/* ---- the data plane: per copy, on its node ---- */
bool up[2] = 1;
byte bits[NC + 1];       /* sequence numbers processed (bit s-1 = seq s) */
byte val[2 * NC];        /* the newest value of each key */
byte role[NC + 1];
byte ctm[NC + 1];        /* the operation primary term the copy knows */

/* ---- each shard primary's replication tracker (its memory) ---- */
byte trk[3];             /* tracked copies: they receive every operation */
byte isy[3];             /* copies the primary counts as in sync */
byte tseq[NC];           /* the last seq assigned when tracking of the copy began */
byte mseq[3];            /* the last sequence number assigned */
byte permits;            /* operations in flight on the parent primary */

/* ---- the cluster state, committed through consensus ---- */
#ifdef SHORTEST
byte csv;                /* version (breadth-first search takes no hidden variable) */
#else
hidden byte csv;         /* version: for the trace only, not part of the state */
#endif
mtype st = S_NONE;
byte term[3];
byte prim[3];
byte insync[3];
byte inrt;               /* copies in the routing table */
byte failed;             /* copies failed by a committed state */
byte gone;               /* nodes that left */
byte vis;                /* search-visible shards */
byte cut;                /* local: the agreed cut */
bool cutset;
byte usedterm[3];        /* the highest term each shard used (I2) */

/* ---- the cluster manager's memory: lost on failover ---- */
byte inboxF;             /* shard-failed requests, a bit per copy */
bool inboxH;             /* the parent primary's hand-off request ... */
byte hins;               /* ... carrying the child copies in sync in its tracker */
bool inboxC;             /* local: the cut proposal ... */
byte cutv;               /* ... and its value */

/* ---- faults and history ---- */
byte crashes, losses, failovers;
byte acked[2];           /* the newest acknowledged value of each key */
bool readbad;            /* R1 broken */
bool promobad;           /* I2 broken */
bool redundbad;          /* I7 broken */

/* ------------------------------------------------------------------ */

inline cancelsplit() {
  st = S_CANCELLED;
  inrt = inrt & ~CCOPIES;
  vis = B(PAR);
  trk[PAR] = trk[PAR] & PCOPIES; isy[PAR] = isy[PAR] & PCOPIES;
  role[cA0] = R_NONE; role[cA1] = R_NONE; role[cB0] = R_NONE; role[cB1] = R_NONE;
  insync[CA] = 0; insync[CB] = 0; prim[CA] = NOCOPY; prim[CB] = NOCOPY;
  printf("MSC: cm: split cancelled, children deleted\n")
}

/* promote copy c of shard sh (or leave the shard red); I2 is checked here */
inline promote(sh, c, i) {
  if
#ifdef MUTANT_PROMOTE_OUT_OF_SYNC_REPLICA
  /* any live copy, as a stale-primary allocation would */
  :: (inrt & B(c)) && up[NODE(c)] ->
#else
  :: !(failed & B(c)) && (inrt & B(c)) && up[NODE(c)] && (insync[sh] & B(c)) ->
#endif
     /* I2: from the committed in-sync set, with a term above any used */
     if
     :: !(insync[sh] & B(c)) || term[sh] + 1 <= usedterm[sh] -> promobad = 1
     :: else
     fi;
#ifdef MUTANT_PROMOTE_OUT_OF_SYNC_REPLICA
     insync[sh] = insync[sh] | B(c); failed = failed & ~B(c);
#endif
     prim[sh] = c; term[sh]++; usedterm[sh] = term[sh];
     role[c] = R_PRIMARY; ctm[c] = term[sh];
     /* fill the gaps below its max seq with no-ops: its history is the group's */
     i = 8;
     do
     :: i > 0 && !((bits[c] >> (i - 1)) & 1) -> i--
     :: else -> break
     od;
     bits[c] = ONES(i); mseq[sh] = i;
     trk[sh] = insync[sh] & ~failed; isy[sh] = trk[sh];
     printf("MSC: cm: copy <%d> promoted, primary of [%d] in term %d\n", c, sh, term[sh])
  :: else ->
     prim[sh] = NOCOPY;
     printf("MSC: cm: [%d] has no in-sync copy left: red\n", sh)
  fi
}

/* a committed state fails the copies in m, then reconciles (one task) */
inline failcopies(m, n, c, i) {
  m = m & inrt & ~failed;
  failed = failed | m;
  insync[0] = insync[0] & ~m; insync[1] = insync[1] & ~m; insync[2] = insync[2] & ~m;
  trk[0] = trk[0] & ~m; trk[1] = trk[1] & ~m; trk[2] = trk[2] & ~m;
  isy[0] = isy[0] & ~m; isy[1] = isy[1] & ~m; isy[2] = isy[2] & ~m;
  printf("MSC: cm: copies {%d} failed, out of in-sync (cs v%d)\n", m, csv);
  /* before the record, a failed parent primary or child copy cancels; under
     `local` the parent replica too (it is the child replicas' source) */
  if
#ifdef LOCAL
  :: st == S_SPLITTING && (failed & (PCOPIES | CCOPIES)) -> inboxH = 0; cancelsplit()
#else
  :: st == S_SPLITTING && (failed & (B(cP) | CCOPIES)) -> inboxH = 0; cancelsplit()
#endif
  :: else
  fi;
  /* a failed parent primary: promote a parent copy, only before the record */
  if
  :: prim[PAR] != NOCOPY && (failed & B(prim[PAR])) &&
#ifdef MUTANT_PROMOTE_PARENT_REPLICA_AFTER_HANDOFF
     st != S_COMMITTED ->
     if
     :: st == S_HANDOFF ->
        printf("MSC: cm: parent primary failed mid-split: promote a parent replica, abandon the split\n");
        cancelsplit()
     :: else
     fi;
#else
     !RECORDED ->
#endif
     promote(PAR, cR, i)
  :: else
  fi;
  /* after the record, a failed child primary: promote the child's replica */
  n = CA;
  do
  :: n > CB -> break
  :: n <= CB ->
     if
     :: RECORDED && prim[n] != NOCOPY && (failed & B(prim[n])) -> promote(n, 2 * n + 1, i)
     :: else
     fi;
     n++
  od
}

/* ------------------------------------------------------------------ */

/*
 * A coordinator writing key k. It routes by the cluster state it last saw and,
 * after a failure or a refusal, waits for a state that routes its key
 * elsewhere (the only thing a newer state changes for it). The primary's side
 * of the request (seq assignment, replication, the shard-failed round trip)
 * runs in the same process: it is the request's handler on the primary's node.
 */
proctype client(byte k; byte nw) {
  byte v = 1, att, res, p, sh, s, pterm, targets, fails, c, vprim = cP;
  do
  :: v > nw -> break
  :: v <= nw ->
     do
     :: att++;
        assert(att <= MAXATT);            /* L1: a write ends within MAXATT attempts */
        res = RES_PENDING;
        /* W1: at the primary, under a permit: assign a seq, apply, read the group;
           while its permits are blocked the request waits (or times out) */
        atomic {
          (vprim == NOCOPY || role[vprim] != R_HANDOFF || !up[NODE(vprim)] || prim[OWNER(k)] != vprim);
          p = vprim;
          if
          :: p == NOCOPY || !up[NODE(p)] || role[p] == R_HANDOFF ||
             role[p] == R_NONE || role[p] == R_TRACKED -> res = RES_FAILED
          :: p != NOCOPY && up[NODE(p)] && role[p] == R_RETIRED -> res = RES_RETIRED
          :: p != NOCOPY && up[NODE(p)] && role[p] == R_PRIMARY ->
             sh = SH(p);
             assert(HASKEY(p, k));
             assert(mseq[sh] < 8);           /* the model's bound */
             mseq[sh]++; s = mseq[sh];
             bits[p] = bits[p] | SEQ(s);
             if :: VAL(p, k) < v -> VAL(p, k) = v :: else fi;
             pterm = ctm[p];
             targets = trk[sh] & ~B(p);
             if :: sh == PAR -> permits++ :: else fi;
             printf("MSC: write k%d=%d: seq %d at primary <%d>\n", k, v, s, p)
          fi
        }
        if
        :: res == RES_PENDING ->
           /* W2: replicate to every tracked copy; any message may be lost.
              Acknowledged here if no copy missed it */
           atomic {
             if
             :: !up[NODE(p)] -> res = RES_FAILED
             :: else ->
                c = 0;
                do
                :: c == NC -> break
                :: c < NC && !(targets & B(c)) -> c++
                :: c < NC && (targets & B(c)) ->
                   if
                   :: !up[NODE(c)] || role[c] == R_NONE -> fails = fails | B(c)
                   :: up[NODE(c)] && role[c] != R_NONE && losses < MAXLOSS ->
                      losses++; fails = fails | B(c);
                      printf("MSC: fault: seq %d to copy <%d> lost\n", s, c)
                   :: up[NODE(c)] && role[c] != R_NONE && ctm[c] > pterm ->
                      res = RES_FAILED    /* a newer primary exists: this one is stale */
                   :: up[NODE(c)] && role[c] != R_NONE && ctm[c] <= pterm ->
#ifdef MUTANT_CHILD_LCP_SKIPS_FILTERED
                      if :: HASKEY(c, k) -> bits[c] = bits[c] | SEQ(s) :: else fi;
#else
                      bits[c] = bits[c] | SEQ(s);
#endif
                      if :: HASKEY(c, k) && VAL(c, k) < v -> VAL(c, k) = v :: else fi;
                      ctm[c] = pterm
                   fi;
                   c++
                od;
                c = 0;
                if
                :: res == RES_PENDING && fails == 0 ->
                   if :: sh == PAR -> permits-- :: else fi;
                   res = RES_OK; acked[k] = v;
                   printf("MSC: write k%d=%d acknowledged by primary <%d>\n", k, v, p)
                :: else
                fi
             fi
           }
           /* W3: a copy that missed the write leaves in-sync before the ack */
           if
           :: res == RES_PENDING ->
              atomic {
                inboxF = inboxF | fails;
                printf("MSC: primary <%d> asks the cm to fail copies {%d}\n", p, fails)
              }
#ifndef MUTANT_ACK_BEFORE_INSYNC_REMOVAL
              do
              :: ((failed | ~inrt) & fails) == fails -> break
              :: term[sh] > pterm || !up[NODE(p)] -> res = RES_FAILED; break
              :: (inboxF & fails & inrt & ~failed) != (fails & inrt & ~failed) ->
                 inboxF = inboxF | (fails & inrt & ~failed)   /* re-send after a failover */
              od
#endif
           :: else
           fi;
           /* W4: acknowledge, or give up */
           if
           :: res != RES_OK ->
              atomic {
                if :: sh == PAR -> permits-- :: else fi;
                if
                :: res == RES_PENDING && up[NODE(p)] ->
                   res = RES_OK; acked[k] = v;
                   printf("MSC: write k%d=%d acknowledged by primary <%d>\n", k, v, p)
                :: else -> res = RES_FAILED
                fi
              }
           :: else
           fi
        :: else
        fi;
        targets = 0; fails = 0; pterm = 0; s = 0; p = 0; sh = 0;
        if
        :: res == RES_OK -> break
        :: res == RES_RETIRED ->
           printf("MSC: write k%d=%d refused by the retired parent\n", k, v);
#ifdef MUTANT_COORDINATOR_RETRIES_OLD_OWNER
           skip
#else
           atomic { prim[OWNER(k)] != vprim -> vprim = prim[OWNER(k)] }
#endif
        :: res == RES_FAILED ->
           if
           :: atomic { prim[OWNER(k)] != vprim -> vprim = prim[OWNER(k)] }
           :: insync[OWNER(k)] == 0 && prim[OWNER(k)] == vprim -> goto end_red
           fi
        fi
     od;
     v++; att = 0; res = 0
  od;
  goto done;
end_red:                 /* the owner has no in-sync copy left: red for good */
  (false);
done:
  skip
}

/*
 * A coordinator reading key k once (a realtime get at the primary) at any
 * point after the first ack, routed by the cluster state it last saw. The
 * value must be no older than the newest acknowledged at the instant it is
 * read, which is stricter than at the instant the read began.
 */
proctype reader(byte k) {
  byte snap, p, r = 255, vprim = cP;
  do
  :: atomic {
#ifdef MUTANT_PARENT_SERVES_READS_IN_HANDOFF
       acked[k] > 0 ->
       p = vprim;
       if
       :: p != NOCOPY && up[NODE(p)] && (role[p] == R_PRIMARY || role[p] == R_HANDOFF) ->
#else
       acked[k] > 0 && (vprim == NOCOPY || role[vprim] != R_HANDOFF || !up[NODE(vprim)] || prim[OWNER(k)] != vprim) ->
       p = vprim;
       if
       :: p != NOCOPY && up[NODE(p)] && role[p] == R_PRIMARY ->
#endif
          snap = acked[k]; r = VAL(p, k);
          printf("MSC: read k%d at copy <%d> returns %d (newest acked: %d)\n", k, p, r, snap);
          if :: r < snap -> readbad = 1 :: else fi
       :: else
       fi
     }
     if
     :: r != 255 -> break
     :: else
     fi;
     if
     :: atomic { prim[OWNER(k)] != vprim -> vprim = prim[OWNER(k)] }
     :: insync[OWNER(k)] == 0 && prim[OWNER(k)] == vprim -> goto end_red
     fi
  :: acked[k] == 0 && insync[OWNER(k)] == 0 -> goto end_red   /* nothing will be acked */
  od;
  goto done;
end_red:
  (false);
done:
  skip
}

/* ------------------------------------------------------------------ */

/* the child replica x is in sync once it holds every op assigned before its
   tracking began and has reached the global checkpoint */
#ifdef MUTANT_INSYNC_AT_GCP_ONLY
#define READY(x) ((trk[PAR] & B(x)) && !(isy[PAR] & B(x)) && LCP(x) >= GCP(PAR))
#else
#define READY(x) ((trk[PAR] & B(x)) && !(isy[PAR] & B(x)) && LCP(x) >= GCP(PAR) && LCP(x) >= tseq[x])
#endif
#ifdef LOCAL
#define SRC(x) cR          /* local: the parent replica's own history */
#else
#define SRC(x) ((x) - 1)   /* recover: the child primary */
#endif
#define BEHIND(x) ((bits[SRC(x)] & ~bits[x]) != 0)
#define CATCHUP(x) \
  bits[x] = bits[x] | bits[SRC(x)]; \
  if :: VAL(x, KEY(SH(x))) < VAL(SRC(x), KEY(SH(x))) -> VAL(x, KEY(SH(x))) = VAL(SRC(x), KEY(SH(x))) :: else fi
#define MARK(x) \
  if \
  :: READY(x) -> isy[PAR] = isy[PAR] | B(x); \
     printf("MSC: split: copy <%d> in sync at seq %d (gcp %d, tracked from seq %d)\n", x, LCP(x), GCP(PAR), tseq[x]) \
  :: else \
  fi

/*
 * The split driver on the parent primary's node (node 0). The parent
 * replica's local split (`local`) runs on node 1; its steps are interleaved
 * here, each guarded by its node being up.
 */
proctype splitter() {
  byte g, rep;           /* rep: child copies this driver reported failed */
  (st != S_NONE);
  {
#ifdef LOCAL
    /* C1: propose the cut: the global checkpoint, <= every in-sync copy's LCP */
    atomic {
#ifdef MUTANT_LOCAL_CUT_ABOVE_CHECKPOINT
      g = mseq[PAR];
#else
      g = GCP(PAR);
#endif
      cutv = g; inboxC = 1;
      printf("MSC: split: the parent primary proposes cut %d\n", g)
    }
    do
    :: cutset -> break
    :: !inboxC && !cutset -> inboxC = 1     /* re-send after a failover */
    od;
#endif
    /* S1: the child primaries, split locally from the parent primary, tracked
       and in sync at once (the primary holds every op it assigned) */
    atomic {
      bits[cA0] = bits[cP]; VAL(cA0, 0) = VAL(cP, 0);
      bits[cB0] = bits[cP]; VAL(cB0, 1) = VAL(cP, 1);
      role[cA0] = R_TRACKED; role[cB0] = R_TRACKED; ctm[cA0] = ctm[cP]; ctm[cB0] = ctm[cP];
      trk[PAR] = trk[PAR] | B(cA0) | B(cB0); isy[PAR] = isy[PAR] | B(cA0) | B(cB0);
      printf("MSC: split: child primaries made on node 0 at seq %d, in sync\n", mseq[PAR])
    }
#ifdef LOCAL
    /* C2: the parent replica splits at the cut (node 1): the children start
       with every op up to the cut */
    atomic {
      up[1] && cutset ->
      bits[cA1] = bits[cR] | ONES(cut); VAL(cA1, 0) = VAL(cR, 0);
      bits[cB1] = bits[cR] | ONES(cut); VAL(cB1, 1) = VAL(cR, 1);
      role[cA1] = R_TRACKED; role[cB1] = R_TRACKED; ctm[cA1] = ctm[cR]; ctm[cB1] = ctm[cR];
      printf("MSC: split: the parent replica splits at cut %d on node 1 (its LCP %d)\n", cut, LCP(cR))
    }
    /* C3: the child replicas ask the parent primary to track them */
    atomic {
      up[0] && up[1] ->
      if
      :: losses < MAXLOSS ->
         losses++; rep = CREPLICAS; inboxF = inboxF | rep;
         printf("MSC: fault: the tracking request is lost; child replicas reported failed\n")
      :: true ->
         trk[PAR] = trk[PAR] | CREPLICAS;
         tseq[cA1] = mseq[PAR]; tseq[cB1] = mseq[PAR];
         printf("MSC: split: child replicas tracked from seq %d\n", mseq[PAR])
      fi
    }
#else
    /* S3: the child replicas start peer recovery: tracked from here on */
    atomic {
      trk[PAR] = trk[PAR] | CREPLICAS;
      tseq[cA1] = mseq[PAR]; tseq[cB1] = mseq[PAR];
      role[cA1] = R_TRACKED; role[cB1] = R_TRACKED; ctm[cA1] = ctm[cP]; ctm[cB1] = ctm[cP];
      printf("MSC: split: child replicas tracked from seq %d, recovering\n", mseq[PAR])
    }
#endif
#ifndef MUTANT_HANDOFF_BEFORE_CHILDREN_IN_SYNC
    /* S4: the child replicas catch up from their source (recover: the child
       primary, over the network; local: the parent replica's history on the
       same node), and are marked in sync in the parent's tracker */
    do
    :: (isy[PAR] & CREPLICAS) == CREPLICAS -> break
    :: atomic {
         up[0] && up[1] && !rep && (BEHIND(cA1) || BEHIND(cB1) || READY(cA1) || READY(cB1)) ->
#ifndef LOCAL
         if
         :: losses < MAXLOSS && (BEHIND(cA1) || BEHIND(cB1)) ->
            losses++; rep = CREPLICAS; inboxF = inboxF | rep;
            printf("MSC: fault: a recovery message is lost; child replicas reported failed\n")
         :: true
         fi;
#endif
         if
         :: !rep ->
            CATCHUP(cA1); CATCHUP(cB1);
            MARK(cA1); MARK(cB1)
         :: else
         fi
       }
    :: atomic {   /* a report lost in a failover is sent again */
         rep && (inboxF & rep & inrt & ~failed) != (rep & inrt & ~failed) ->
         inboxF = inboxF | (rep & inrt & ~failed)
       }
    od;
#endif
    /* H1-H4: block the parent's permits; once the operations in flight have
       drained and every child copy is in sync, hand the primary context to
       the child primaries and ask for the hand-off record. (The sequence
       stops at the guard while operations are in flight and goes on
       atomically once they have drained.) */
    atomic {
      role[cP] = R_HANDOFF;
      printf("MSC: split: hand-off begins, the parent's permits are blocked\n");
      permits == 0 &&
#ifdef MUTANT_HANDOFF_BEFORE_CHILDREN_IN_SYNC
      (isy[PAR] & (B(cA0) | B(cB0))) == (B(cA0) | B(cB0)) ->
#else
      (isy[PAR] & CCOPIES) == CCOPIES ->
#endif
      role[cA0] = R_PRIMARY; role[cB0] = R_PRIMARY;
      trk[CA] = trk[PAR] & COPIES(CA); isy[CA] = isy[PAR] & COPIES(CA);
      trk[CB] = trk[PAR] & COPIES(CB); isy[CB] = isy[PAR] & COPIES(CB);
      mseq[CA] = mseq[PAR]; mseq[CB] = mseq[PAR];
      hins = isy[PAR] & CCOPIES; inboxH = 1;
      printf("MSC: split: primary context handed to the children; record requested (in sync: {%d})\n", hins)
    }
    /* H5: the record decides; re-send if a failover lost the request */
    do
    :: atomic {
         RECORDED ->
         role[cP] = R_RETIRED;
         printf("MSC: split: the parent applies the record, retires and releases its block\n")
       };
       break
    :: !inboxH && st == S_SPLITTING -> inboxH = 1
    od
  } unless {
    !up[0] || st == S_CANCELLED
  };
  /* cancelled before the record: the parent is primary again */
  atomic {
    if
    :: up[0] && st == S_CANCELLED && role[cP] == R_HANDOFF ->
       role[cP] = R_PRIMARY;
       printf("MSC: split: the parent aborts the hand-off and is primary again\n")
    :: else
    fi
  }
}

/* ------------------------------------------------------------------ */

/* The cluster-manager leader. Each branch is one task, committed at once. */
proctype cm() {
  byte m, n, c, i;
end_cm:
  do
  /* the split request: reserve the children (a cluster that is not green refuses) */
  :: atomic {
       st == S_NONE ->
       if
       :: gone == 0 && insync[PAR] == PCOPIES && prim[PAR] == cP ->
          st = S_SPLITTING; inrt = inrt | CCOPIES; csv++;
          printf("MSC: cm: split begins, children reserved (cs v%d)\n", csv)
       :: else ->
          st = S_CANCELLED;
          printf("MSC: cm: split refused: the index is not green\n")
       fi
     }
  /* shard-failed requests, batched */
  :: atomic {
       inboxF != 0 ->
       m = inboxF; inboxF = 0;
       csv++;
       failcopies(m, n, c, i);
       m = 0; n = 0; i = 0
     }
  /* the hand-off record: the point of no return */
  :: atomic {
       inboxH && st == S_SPLITTING && prim[PAR] == cP && !(failed & (B(cP) | CCOPIES)) ->
       inboxH = 0;
       st = S_HANDOFF;
       insync[CA] = hins & COPIES(CA); insync[CB] = hins & COPIES(CB);
       prim[CA] = cA0; prim[CB] = cB0;
       term[CA] = term[PAR]; term[CB] = term[PAR];
       usedterm[CA] = term[PAR]; usedterm[CB] = term[PAR];
#ifdef MUTANT_CHILDREN_VISIBLE_BEFORE_PARENT_RETIRED
       vis = vis | B(CA) | B(CB);
#else
       vis = B(CA) | B(CB);
#endif
       /* I7: each child has at least as many in-sync copies as the parent */
       i = ((insync[PAR] >> cP) & 1) + ((insync[PAR] >> cR) & 1);
       if
       :: ((insync[CA] >> cA0) & 1) + ((insync[CA] >> cA1) & 1) < i ||
          ((insync[CB] >> cB0) & 1) + ((insync[CB] >> cB1) & 1) < i -> redundbad = 1
       :: else
       fi;
       i = 0;
       csv++;
       printf("MSC: cm: hand-off record committed; the children own their ranges (cs v%d)\n", csv)
     }
  /* after the record: roll forward only */
  :: atomic {
       st == S_HANDOFF ->
       st = S_COMMITTED;
       inrt = inrt & ~PCOPIES; insync[PAR] = 0; prim[PAR] = NOCOPY; vis = B(CA) | B(CB);
       role[cP] = R_NONE; role[cR] = R_NONE;
       trk[PAR] = 0; isy[PAR] = 0;
       csv++;
       printf("MSC: cm: split committed, the parent removed (cs v%d)\n", csv)
     }
#ifdef LOCAL
  :: atomic {
       inboxC && st == S_SPLITTING && !cutset ->
       inboxC = 0; cut = cutv; cutset = 1; csv++;
       printf("MSC: cm: cut %d committed (cs v%d)\n", cut, csv)
     }
#endif
  od
}

/* Faults: a node crash and a cluster-manager failover, each at any step,
   until the faults stop (also at any step; message losses are drawn where
   the messages are sent). The cluster manager's node-left task is committed
   with the crash: a state in which a node is dead and not yet removed leads
   nowhere that "the node crashes a step later" does not. */
proctype faults() {
  byte m, n, c, i;
end_f:
  do
  :: atomic {
       crashes < MAXCRASH ->
       crashes++;
       if
       :: n = 0; printf("MSC: fault: node 0 crashes (P, A0, B0)\n")
       :: n = 1; printf("MSC: fault: node 1 crashes (R, A1, B1)\n")
       fi;
       /* the cluster manager sees the node leave and fails its copies */
       up[n] = 0; gone = gone | B(n);
       m = B(n) | B(n + 2) | B(n + 4);
       csv++;
       failcopies(m, n, c, i);
       m = 0; n = 0; i = 0
     }
  :: atomic {
       failovers < MAXFO ->
       failovers++;
       inboxF = 0; inboxH = 0; inboxC = 0;
       printf("MSC: fault: cluster-manager failover; its inbox is lost\n");
#ifdef MUTANT_LOSE_HANDOFF_RECORD
       if
       :: st == S_HANDOFF ->   /* the record was published before it was durable */
          st = S_SPLITTING; insync[CA] = 0; insync[CB] = 0;
          prim[CA] = NOCOPY; prim[CB] = NOCOPY; vis = B(PAR); csv++;
          printf("MSC: cm: the new leader's state has no hand-off record (cs v%d)\n", csv)
       :: else
       fi
#endif
     }
  :: break    /* the faults stop: from here the split must end by itself */
  od
}

/* ------------------------------------------------------------------ */

/* I3/I4: every live in-sync copy of the owner holds the acknowledged value */
#define HOLDS(c, k) (!(insync[SH(c)] & B(c)) || !up[NODE(c)] || VAL(c, k) >= acked[k])
#define NOLOSS(k) (acked[k] == 0 || \
  (OWNER(k) == PAR -> (HOLDS(cP, k) && HOLDS(cR, k)) : (HOLDS(2 * CH(k), k) && HOLDS(2 * CH(k) + 1, k))))
/* I5: exactly one search-visible shard per key */
#define ONEVIS(k) (((vis >> PAR) & 1) + ((vis >> CH(k)) & 1) == 1)
#define SAFE (NOLOSS(0) && NOLOSS(1) && !readbad && ONEVIS(0) && ONEVIS(1) && !promobad && !redundbad)

/* L1: when nothing can move, the split has ended and every write is
   acknowledged, unless its shard has no in-sync copy left */
#define DONE(k, n) (acked[k] == (n) || insync[OWNER(k)] == 0)
#define SETTLED (ENDED && DONE(0, WRITES0) && DONE(1, WRITES1))

#define SUMMARY \
  printf("MSC: state: split %e; acked k0=%d k1=%d; nodes up %d %d\n", st, acked[0], acked[1], up[0], up[1]); \
  printf("MSC: state: k0 on P R A0 A1 = %d %d %d %d; k1 on P R B0 B1 = %d %d %d %d\n", \
    VAL(cP, 0), VAL(cR, 0), VAL(cA0, 0), VAL(cA1, 0), VAL(cP, 1), VAL(cR, 1), VAL(cB0, 1), VAL(cB1, 1)); \
  printf("MSC: state: in-sync PAR {%d} CA {%d} CB {%d}; primaries <%d> <%d> <%d>\n", \
    insync[PAR], insync[CA], insync[CB], prim[PAR], prim[CA], prim[CB])

proctype monitor() {
end_m:
  do
  :: atomic {
       !SAFE ->
       SUMMARY;
       assert(NOLOSS(0) && NOLOSS(1));   /* I3/I4: no acknowledged write lost */
       assert(!readbad);                 /* R1: no read older than an acked write */
       assert(ONEVIS(0) && ONEVIS(1));   /* I5: no search counts a key twice */
       assert(!promobad);                /* I2: promotion from the in-sync set, term up */
       assert(!redundbad)                /* I7: the hand-off keeps redundancy */
     }
  :: atomic {
       timeout && !SETTLED ->
       SUMMARY;
       assert(SETTLED)   /* L1: when nothing can move, the split has ended and every write is acknowledged */
     }
  od
}

/* L2: under weak fairness, every run ends the split (checked with -a -f) */
ltl ends { <> (st == S_COMMITTED || st == S_CANCELLED) }

init {
  atomic {
    role[cP] = R_PRIMARY; role[cR] = R_TRACKED; role[NOCOPY] = R_NONE;
    ctm[cP] = 1; ctm[cR] = 1;
    term[PAR] = 1; usedterm[PAR] = 1;
    prim[PAR] = cP; prim[CA] = NOCOPY; prim[CB] = NOCOPY;
    insync[PAR] = PCOPIES; inrt = PCOPIES;
    trk[PAR] = PCOPIES; isy[PAR] = PCOPIES;
    vis = B(PAR);
    run monitor();
    run cm();
    run faults();
    run splitter();
    run client(0, WRITES0);
    run client(1, WRITES1);
    run reader(0)
  }
}
