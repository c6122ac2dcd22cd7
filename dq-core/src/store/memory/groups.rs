//! Groups in the embedded store: the mirror of `lua/lib.lua`'s groups section, `group.lua`
//! and the group passes of `fetch.lua` (see `crate::group`).
//!
//! A due grouped job waits in its group's queue (`gready`), never in the partition's due
//! queue; its group is then in the rotation (`groups`, by turn) unless it waits (`gwait`, by
//! the ms its wait ends), and it may be in both, as on Redis. The queues here are exact (no
//! stale hints): a job leaving ready leaves its group's queue at once, so a group whose
//! queue holds only stale hints on Redis (read, dropped, then left) is found empty here at
//! once.
//!
//! One choice differs from `fetch.lua` on purpose: a group a fetch finds empty (it leaves
//! the rotation) but that gets a due job promoted by the same fetch keeps a turn at the back
//! here. On Redis the promoted job's `push_grouped` runs before `write_groups` removes the
//! group, so the job waits in `gready` with its group neither in the rotation nor waiting
//! until an idle fetch's audit re-links it (the checker's "neither a turn nor a wait").

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::partition::{Counters, Partition};
use crate::group::{
    CAP_RECHECK, GROUP_SCAN, GROUP_SPARE, GroupChange, GroupLimits, GroupName, GroupState,
};
use crate::job::Queue;
use crate::names::JobKey;
use crate::store::lease::{Delivery, NewerRecord};

/// The turn `group.lua` gives a group whose limits changed while it waited: before every
/// other (Redis score 0, below every place).
const FIRST_TURN: i64 = i64::MIN;

/// How long a group at its cap waits if none of its jobs ends meanwhile (ms).
pub(super) fn cap_recheck_ms() -> u64 {
    u64::try_from(CAP_RECHECK.as_millis()).unwrap_or(u64::MAX)
}

/// One partition's group settings and state (the `gctl`, `groups`, `gwait`, `gactive` and
/// `gready` keys on Redis).
#[derive(Default)]
pub(super) struct Groups {
    /// The default limits of every group without its own (`*`).
    pub(super) default: Option<GroupLimits>,
    /// Groups' own limits (`l:<group>`).
    pub(super) own: HashMap<GroupName, GroupLimits>,
    /// When each held group may start jobs again (`h:<group>`).
    pub(super) holds: HashMap<GroupName, u64>,
    /// Each rated group's GCRA time (`t:<group>`).
    pub(super) tats: HashMap<GroupName, f64>,
    /// Each group's due jobs, `(band, position) → key`: highest priority first, FIFO within a
    /// priority (positions from the partition's due-queue counters), groups by name
    /// (`gready`). A group without due jobs has no entry.
    pub(super) queues: BTreeMap<GroupName, BTreeMap<(u8, i64), JobKey>>,
    /// How many jobs `queues` holds.
    pub(super) queued: usize,
    /// The rotation, `(turn, group)` (`groups`), and each group's turn.
    pub(super) rotation: BTreeSet<(i64, GroupName)>,
    turn_of: HashMap<GroupName, i64>,
    /// The waiting groups, `(until ms, group)` (`gwait`), and each one's time.
    pub(super) waiting: BTreeSet<(u64, GroupName)>,
    wait_of: HashMap<GroupName, u64>,
    /// Each group's running jobs (`gactive`).
    pub(super) running: HashMap<GroupName, HashSet<JobKey>>,
}

impl Groups {
    /// Queues `key` in `group`'s queue at `(band, pos)`, its group joining the rotation at
    /// turn `pos` unless there already (lib.lua `push_grouped`).
    pub(super) fn push(&mut self, group: &GroupName, band: u8, pos: i64, key: &JobKey) {
        self.queues
            .entry(group.clone())
            .or_default()
            .insert((band, pos), key.clone());
        self.queued += 1;
        if !self.turn_of.contains_key(group) {
            self.set_turn(group, pos);
        }
    }

    /// Takes `key` out of `group`'s queue (a grouped ready job leaving ready).
    pub(super) fn unlink(&mut self, group: &GroupName, band: u8, pos: i64) {
        if let Some(q) = self.queues.get_mut(group) {
            if q.remove(&(band, pos)).is_some() {
                self.queued -= 1;
            }
            if q.is_empty() {
                self.queues.remove(group);
            }
        }
    }

    /// The front of `group`'s queue.
    pub(super) fn front(&self, group: &GroupName) -> Option<((u8, i64), &JobKey)> {
        self.queues
            .get(group)
            .and_then(|q| q.first_key_value())
            .map(|(at, key)| (*at, key))
    }

    /// How many due jobs `group` has.
    pub(super) fn queue_len(&self, group: &GroupName) -> usize {
        self.queues.get(group).map_or(0, BTreeMap::len)
    }

    /// Whether `group` is in the rotation.
    pub(super) fn in_rotation(&self, group: &GroupName) -> bool {
        self.turn_of.contains_key(group)
    }

    /// Gives `group` the turn `turn` (in the rotation or not).
    pub(super) fn set_turn(&mut self, group: &GroupName, turn: i64) {
        if let Some(old) = self.turn_of.insert(group.clone(), turn) {
            self.rotation.remove(&(old, group.clone()));
        }
        self.rotation.insert((turn, group.clone()));
    }

    /// Takes `group` out of the rotation.
    pub(super) fn leave_rotation(&mut self, group: &GroupName) {
        if let Some(old) = self.turn_of.remove(group) {
            self.rotation.remove(&(old, group.clone()));
        }
    }

    /// Makes `group` wait until `until` (replacing any earlier wait).
    pub(super) fn wait(&mut self, group: &GroupName, until: u64) {
        if let Some(old) = self.wait_of.insert(group.clone(), until) {
            self.waiting.remove(&(old, group.clone()));
        }
        self.waiting.insert((until, group.clone()));
    }

    /// Ends `group`'s wait; whether it waited.
    pub(super) fn unwait(&mut self, group: &GroupName) -> bool {
        match self.wait_of.remove(group) {
            Some(old) => {
                self.waiting.remove(&(old, group.clone()));
                true
            }
            None => false,
        }
    }

    /// A grouped job leased: it counts against its group's cap.
    pub(super) fn started(&mut self, group: &GroupName, key: &JobKey) {
        self.running
            .entry(group.clone())
            .or_default()
            .insert(key.clone());
    }

    /// How many of `group`'s jobs run.
    pub(super) fn running_of(&self, group: &GroupName) -> u64 {
        self.running.get(group).map_or(0, |r| r.len() as u64)
    }

    /// A running grouped job left `active` (lib.lua `groups_done`): it no longer counts
    /// against its group's cap, and a waiting group gets its turn back at `turn` (the back).
    /// Whether it did (the caller wakes a fetcher).
    pub(super) fn done(&mut self, group: &GroupName, key: &JobKey, turn: i64) -> bool {
        if let Some(r) = self.running.get_mut(group) {
            r.remove(key);
            if r.is_empty() {
                self.running.remove(group);
            }
        }
        if !self.unwait(group) {
            return false;
        }
        if !self.in_rotation(group) {
            self.set_turn(group, turn);
        }
        true
    }

    /// The limits `group` follows: its own, else the default.
    pub(super) fn limits_of(&self, group: &GroupName) -> Option<GroupLimits> {
        self.own.get(group).copied().or(self.default)
    }

    /// Holds `group` until `until` (never shortened): it leaves the rotation and waits until
    /// its hold ends (`fail.lua`'s throttle of a grouped job).
    pub(super) fn hold(&mut self, group: &GroupName, until: u64) {
        let h = self.holds.entry(group.clone()).or_insert(0);
        *h = (*h).max(until);
        let until = *h;
        self.leave_rotation(group);
        self.wait(group, until);
    }

    /// `group.lua`: applies `change` (checked by the caller) and reports the group's state.
    /// Returns whether anything changed (the caller wakes the fetchers).
    pub(super) fn change(&mut self, change: &GroupChange, now: u64) -> (GroupState, bool) {
        let mut changed = false;
        match (&change.group, change.limits) {
            (None, Some(l)) => {
                self.default = l;
                changed = true;
            }
            (Some(g), Some(l)) => {
                match l {
                    Some(l) => self.own.insert(g.clone(), l),
                    None => self.own.remove(g),
                };
                changed = true;
                // a fresh budget; a waiting group gets its turn back, first
                self.tats.remove(g);
                if self.unwait(g) && !self.in_rotation(g) {
                    self.set_turn(g, FIRST_TURN);
                }
            }
            _ => {}
        }
        if let (Some(g), Some(hold)) = (&change.group, change.hold) {
            let until = now.saturating_add(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX));
            let old = self.holds.get(g).copied().unwrap_or(0);
            if until > old {
                self.holds.insert(g.clone(), until);
                self.leave_rotation(g);
                self.wait(g, until);
            }
            changed = true;
        }
        let state = match &change.group {
            None => GroupState {
                limits: None,
                default_limits: self.default,
                held_until_ms: None,
                running: self.running.values().map(|r| r.len() as u64).sum(),
                waiting: self.queued as u64,
            },
            Some(g) => GroupState {
                limits: self.own.get(g).copied(),
                default_limits: self.default,
                held_until_ms: self.holds.get(g).copied().filter(|&h| h > now),
                running: self.running_of(g),
                waiting: self.queue_len(g) as u64,
            },
        };
        (state, changed)
    }
}

/// Why a group may start no more jobs now (fetch.lua `group_budget`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    Cap,
    Rate,
    Hold,
}

/// A group one fetch looks at (fetch.lua's `st`).
struct Candidate {
    group: GroupName,
    /// Taken from the waiting groups (its wait ended).
    waited: bool,
    limits: Option<GroupLimits>,
    /// How many it may start in this fetch (`usize::MAX`: no limit).
    allow: usize,
    why: Option<Why>,
    until: u64,
    leased: usize,
    running: u64,
    /// The rate's emission interval and burst tolerance, when a rate was looked at.
    rate: Option<(f64, f64)>,
    tat: f64,
    reached: bool,
    done: bool,
    empty: bool,
    /// When it was last served in this fetch (0: never): the last served get the last turns.
    served: u64,
}

/// The group passes of one fetch: the candidates, built once (on the first pass with room).
pub(super) struct GroupPass {
    /// Whether any group was in the rotation or waiting when the fetch began.
    has_groups: bool,
    cands: Option<Vec<Candidate>>,
    /// Counts the groups' services.
    serial: u64,
}

/// The most rounds one group pass makes over its candidates.
const GROUP_ROUNDS: usize = 64;

impl GroupPass {
    /// The group passes of a fetch of a partition whose groups are `groups`.
    pub(super) fn new(groups: &Groups) -> Self {
        GroupPass {
            has_groups: !groups.rotation.is_empty() || !groups.waiting.is_empty(),
            cands: None,
            serial: 0,
        }
    }
}

impl Groups {
    /// A candidate's budget by its limits (fetch.lua `group_budget`).
    fn budget(&self, st: &mut Candidate, now: u64) {
        if let Some(&hold) = self.holds.get(&st.group)
            && hold > now
        {
            (st.allow, st.why, st.until) = (0, Some(Why::Hold), hold);
            return;
        }
        st.allow = usize::MAX;
        let Some(l) = st.limits else { return };
        if let Some(conc) = l.concurrency {
            st.running = self.running_of(&st.group);
            let allow = i128::from(conc) - i128::from(st.running);
            if allow <= 0 {
                (st.allow, st.why, st.until) = (0, Some(Why::Cap), now + cap_recheck_ms());
                return;
            }
            st.allow = usize::try_from(allow).unwrap_or(usize::MAX);
        }
        if let Some(rate) = l.rate {
            let (t, tau) = super::partition::Control::gcra(rate);
            st.rate = Some((t, tau));
            st.tat = self
                .tats
                .get(&st.group)
                .copied()
                .unwrap_or(0.0)
                .max(now as f64);
            let budget = ((now as f64 + tau - st.tat) / t).floor() + 1.0;
            if budget <= 0.0 {
                let until = ((st.tat - tau).ceil() as u64).max(now + 1);
                (st.allow, st.why, st.until) = (0, Some(Why::Rate), until);
                return;
            }
            st.allow = st.allow.min(budget as usize);
        }
    }

    /// The groups a fetch with room for `room` more jobs looks at (fetch.lua
    /// `group_candidates`): those whose wait ended, earliest first, then the rotation's head,
    /// at most `room` + [`GROUP_SPARE`] and [`GROUP_SCAN`] in all, at most half of them
    /// waited.
    fn candidates(&self, now: u64, room: usize) -> Vec<Candidate> {
        let scan = GROUP_SCAN.min(room + GROUP_SPARE);
        // (at most half of them groups whose wait ended: fetch.lua's `waited`)
        let waited = (scan / 2).max(1);
        let mut names: Vec<(GroupName, bool)> = self
            .waiting
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(waited)
            .map(|(_, g)| (g.clone(), true))
            .collect();
        if names.len() < scan {
            let from_wait: HashSet<GroupName> = names.iter().map(|(g, _)| g.clone()).collect();
            let head: Vec<GroupName> = self
                .rotation
                .iter()
                .take(scan - names.len())
                .filter(|(_, g)| !from_wait.contains(g))
                .map(|(_, g)| g.clone())
                .collect();
            names.extend(head.into_iter().map(|g| (g, false)));
        }
        names
            .into_iter()
            .map(|(group, waited)| {
                let mut st = Candidate {
                    limits: self.limits_of(&group),
                    group,
                    waited,
                    allow: 0,
                    why: None,
                    until: 0,
                    leased: 0,
                    running: 0,
                    rate: None,
                    tat: 0.0,
                    reached: false,
                    done: false,
                    empty: false,
                    served: 0,
                };
                self.budget(&mut st, now);
                st
            })
            .collect()
    }
}

impl Partition {
    /// Leases up to `want` grouped jobs, round by round over the candidates, each at most its
    /// weight per round within its budget (fetch.lua `take_groups`). A job whose expiry has
    /// come is dropped and counted, never leased; a newer dq's record ends its group's pass.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take_groups(
        &mut self,
        pass: &mut GroupPass,
        want: usize,
        queue: &Queue,
        jobs: &mut Vec<Delivery>,
        newer: &mut Vec<NewerRecord>,
        next_token: &mut dyn FnMut(&mut Counters) -> u64,
        max_jobs: usize,
        now: u64,
        deadline: u64,
    ) {
        if !pass.has_groups || want == 0 {
            return;
        }
        let cands = pass.cands.get_or_insert_with(|| {
            self.sets
                .groups
                .candidates(now, max_jobs.saturating_sub(jobs.len()))
        });
        let weight_of = |st: &Candidate| st.limits.map_or(1, |l| l.weight as usize);
        let mut left = want.min(max_jobs.saturating_sub(jobs.len()));
        for _ in 0..GROUP_ROUNDS {
            let mut progressed = false;
            // (each takes its weight times m: a round per weight while room is short, fewer
            // rounds when it is not)
            let weights: usize = cands
                .iter()
                .filter(|st| !st.done && st.allow > st.leased)
                .map(weight_of)
                .sum();
            let m = (left / weights.max(1)).max(1);
            for st in cands.iter_mut() {
                if left == 0 {
                    break;
                }
                st.reached = true;
                let n = weight_of(st)
                    .saturating_mul(m)
                    .min(st.allow.saturating_sub(st.leased))
                    .min(left);
                if st.done || n == 0 {
                    continue;
                }
                pass.serial += 1;
                st.served = pass.serial;
                let got = n.min(self.sets.groups.queue_len(&st.group));
                if got < n {
                    (st.done, st.empty) = (true, true);
                }
                progressed |= got > 0;
                for _ in 0..got {
                    let Some(((band, pos), key)) = self
                        .sets
                        .groups
                        .front(&st.group)
                        .map(|(at, key)| (at, key.clone()))
                    else {
                        break;
                    };
                    if let Some(rec) = self.jobs.get(&key).filter(|r| r.is_newer()) {
                        // left where it is, with the rest of its group's queue
                        newer.push(NewerRecord {
                            key,
                            format: rec.format,
                        });
                        (st.done, st.empty) = (true, false);
                        break;
                    }
                    self.sets.groups.unlink(&st.group, band, pos);
                    if self.drop_if_expired(&key, now) {
                        continue;
                    }
                    let next = next_token(&mut self.counters);
                    if let Some(d) = self.lease_now(queue, key, next, now, deadline) {
                        jobs.push(d);
                        st.leased += 1;
                        left -= 1;
                    }
                }
                if st.leased >= st.allow && st.why.is_none() {
                    // its budget is spent: why, and until when
                    let conc = st.limits.and_then(|l| l.concurrency);
                    match st.rate {
                        Some((t, tau))
                            if conc.is_none_or(|c| {
                                (st.allow as i128) < i128::from(c) - i128::from(st.running)
                            }) =>
                        {
                            let tat = st.tat + st.leased as f64 * t;
                            st.why = Some(Why::Rate);
                            st.until = ((tat - tau).ceil() as u64).max(now + 1);
                        }
                        _ => {
                            st.why = Some(Why::Cap);
                            st.until = now + cap_recheck_ms();
                        }
                    }
                }
            }
            if !progressed || left == 0 {
                break;
            }
        }
    }

    /// The groups' moves after a fetch's passes (fetch.lua `write_groups`): the rates' times
    /// move on, and each group looked at leaves the rotation (empty), waits (held back) or
    /// gets a turn at the back (served with work left, or its wait ended). Returns whether a
    /// group has work it may start now.
    pub(super) fn write_groups(&mut self, pass: &mut GroupPass) -> bool {
        let Some(mut cands) = pass.cands.take() else {
            return false;
        };
        // new turns in the order the groups were last served; those not served first
        cands.sort_by_key(|st| st.served);
        let mut more = false;
        let mut turns = 0;
        for st in cands {
            let g = &st.group;
            let groups = &mut self.sets.groups;
            if st.leased > 0
                && let Some((t, _)) = st.rate
            {
                groups.tats.insert(g.clone(), st.tat + st.leased as f64 * t);
            }
            // (a group whose queue ran out but got a due job promoted by this fetch keeps a
            // turn: see the module's notes)
            let refilled = st.empty && groups.queue_len(g) > 0;
            if st.empty && !refilled {
                groups.leave_rotation(g);
                if st.waited {
                    groups.unwait(g);
                }
            } else if let Some(_why) = st.why {
                groups.leave_rotation(g);
                groups.wait(g, st.until);
            } else if st.reached || st.waited || refilled {
                let turn = self.sets.next_place();
                let groups = &mut self.sets.groups;
                groups.set_turn(g, turn);
                if st.waited {
                    groups.unwait(g);
                }
                turns += 1;
                more |= st.reached;
            }
        }
        more || self.sets.groups.rotation.len() > turns
    }
}
