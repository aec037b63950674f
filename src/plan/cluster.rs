//! The GPU pool as nodes: what fits where.
//!
//! Every instance's TP group sits inside one node, so an instance of `g` GPUs is an *item*
//! of `g` GPUs that needs one node with `g` free. An instance larger than a node (only when
//! `max_tp` is raised past the node size) takes `g / node_size` whole free nodes: it is that
//! many items of one node each. Identical nodes form one [`NodeClass`] with a count.
//!
//! Packing is exact in closed form when the item sizes on a GPU type form a divisibility
//! chain (1, 2, 4, 8 …, any node capacities): then items fit iff, for every size `s`, the
//! GPUs of items of size ≥ `s` are at most `s · Σ_nodes ⌊free/s⌋` (place large items first,
//! anywhere; what is left of each node is still a multiple of every smaller size). Sizes that
//! do not divide each other (3 and 8, 5 and 2 …) need a search over how many large items
//! each node takes ([`Cluster::most_small`]).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::scenario::{NodeClass, Scenario};

thread_local! {
    /// When the calling planner's time limit runs out. The exact searches over nodes are
    /// only ever help (a hint, a bound, a comparison, a check with a relaxed fallback): past
    /// this instant they give up with `Err(TooLarge)` as if they were too large, so the Rust
    /// steps of a planner call end within its limit. Per thread: a call runs on one.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Holds the thread's search deadline until dropped (then the previous one is back).
pub struct Until(Option<Instant>);

/// Exact searches on this thread give up after `deadline` while the guard lives.
pub fn until(deadline: Option<Instant>) -> Until {
    Until(DEADLINE.with(|d| d.replace(deadline)))
}

impl Drop for Until {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.0));
    }
}

/// Whether this thread's search deadline has passed.
pub fn past_deadline() -> bool {
    DEADLINE
        .with(|d| d.get())
        .is_some_and(|t| Instant::now() >= t)
}

/// The exact most-small tables already computed for one pool, by (GPU type, large, small):
/// a hint, a bound and a rule-blind comparison ask the same question for many pairs and
/// counts, and one dynamic programme answers every count at once.
#[derive(Default)]
struct Tables(Mutex<HashMap<TableKey, Arc<Vec<i64>>>>);

/// (GPU type, large item size, small item size).
type TableKey = (usize, i64, i64);

impl Clone for Tables {
    fn clone(&self) -> Self {
        Tables::default() // a copy of the pool recomputes what it needs
    }
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tables")
    }
}

/// No arrangement reaches this count (the dynamic programme's minus infinity).
const NONE: i64 = i64::MIN / 4;

/// Operations allowed in one exact search over nodes before it gives up (a hint or an
/// oracle only; callers have a fallback).
const SEARCH_BUDGET: i64 = 20_000_000;

/// An exact search over nodes would take more than its budget of steps (callers fall back
/// to a closed-form relaxation or report the plan as unchecked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

/// What one instance occupies: `pieces` items of `piece` GPUs on nodes of `gpu_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Item {
    pub gpu_type: usize,
    pub piece: i64,
    pub pieces: i64,
}

/// Nodes grouped by (GPU type, free GPUs), in the order the caller listed them.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub classes: Vec<NodeClass>,
    /// The caller's node numbers of each class's nodes (launch lines name them).
    pub node_ids: Vec<Vec<usize>>,
    node_size: Vec<i64>,
    tables: Tables,
    /// `caps[t][s]`: [`Cluster::cap`] for sizes up to the largest free count of type `t`
    /// (the closed forms ask it for every count of every pair).
    caps: Vec<Vec<i64>>,
}

/// A node fill pattern: a maximal multiset of item sizes that fits one node of a class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub class: usize,
    /// (piece size, how many) in descending size.
    pub items: Vec<(i64, i64)>,
}

/// Whether two item sizes divide one another (then the per-size capacity cuts pack exactly).
pub fn chain(a: i64, b: i64) -> bool {
    a > 0 && b > 0 && (a % b == 0 || b % a == 0)
}

impl Cluster {
    pub fn new(sc: &Scenario) -> Cluster {
        let mut classes: Vec<NodeClass> = Vec::new();
        let mut node_ids: Vec<Vec<usize>> = Vec::new();
        let mut next = 0usize;
        for c in &sc.nodes {
            let ids = next..next.saturating_add(c.count.max(0) as usize);
            next = ids.end;
            if c.free <= 0 || c.count <= 0 {
                continue;
            }
            match classes
                .iter()
                .position(|k| k.gpu_type == c.gpu_type && k.free == c.free)
            {
                Some(i) => {
                    classes[i].count += c.count;
                    node_ids[i].extend(ids);
                }
                None => {
                    classes.push(*c);
                    node_ids.push(ids.collect());
                }
            }
        }
        Cluster {
            classes,
            node_ids,
            node_size: sc.gpu_types.iter().map(|g| g.node_size).collect(),
            tables: Tables::default(),
            caps: Vec::new(),
        }
        .with_caps()
    }

    /// `gpus` GPUs of one type on full nodes of `node_size`, the last one partial (what a
    /// plain GPU count means).
    pub fn uniform(node_size: i64, gpus: i64) -> Cluster {
        let (full, rest) = (gpus / node_size, gpus % node_size);
        let mut classes = Vec::new();
        let mut node_ids = Vec::new();
        if full > 0 {
            classes.push(NodeClass {
                gpu_type: 0,
                free: node_size,
                count: full,
            });
            node_ids.push((0..full as usize).collect());
        }
        if rest > 0 {
            classes.push(NodeClass {
                gpu_type: 0,
                free: rest,
                count: 1,
            });
            node_ids.push(vec![full as usize]);
        }
        Cluster {
            classes,
            node_ids,
            node_size: vec![node_size],
            tables: Tables::default(),
            caps: Vec::new(),
        }
        .with_caps()
    }

    pub fn node_size(&self, t: usize) -> i64 {
        self.node_size[t]
    }

    fn of_type(&self, t: usize) -> impl Iterator<Item = (usize, &NodeClass)> {
        self.classes
            .iter()
            .enumerate()
            .filter(move |(_, c)| c.gpu_type == t)
    }

    fn with_caps(mut self) -> Cluster {
        let types = self.node_size.len().max(
            self.classes
                .iter()
                .map(|c| c.gpu_type + 1)
                .max()
                .unwrap_or(0),
        );
        self.caps = (0..types)
            .map(|t| {
                let top = self.of_type(t).map(|(_, c)| c.free).max().unwrap_or(0);
                // Small tables only (free counts are GPUs per node).
                let top = top.clamp(0, 4096);
                (0..=top).map(|s| self.count_cap(t, s)).collect()
            })
            .collect();
        self
    }

    /// Items of `s` GPUs that nodes of type `t` hold, each in one node: Σ count · ⌊free/s⌋.
    pub fn cap(&self, t: usize, s: i64) -> i64 {
        match self.caps.get(t) {
            Some(caps) if s >= 0 && (s as usize) < caps.len() => caps[s as usize],
            // Larger than every node's free GPUs: none fits.
            Some(caps) if s as usize >= caps.len() && caps.len() > 1 && caps.len() <= 4096 => 0,
            _ => self.count_cap(t, s),
        }
    }

    fn count_cap(&self, t: usize, s: i64) -> i64 {
        if s <= 0 {
            return 0;
        }
        self.of_type(t)
            .map(|(_, c)| c.count.saturating_mul(c.free / s))
            .fold(0, i64::saturating_add)
    }

    /// The item of an instance of `gpus` GPUs on type `t`, or None when no node (or set of
    /// whole free nodes) can hold one.
    pub fn item(&self, t: usize, gpus: i64) -> Option<Item> {
        let node = self.node_size[t];
        if gpus <= 0 {
            return None;
        }
        let item = if gpus <= node {
            Item {
                gpu_type: t,
                piece: gpus,
                pieces: 1,
            }
        } else if gpus % node == 0 {
            Item {
                gpu_type: t,
                piece: node,
                pieces: gpus / node,
            }
        } else {
            return None; // would span nodes unevenly
        };
        (self.cap(t, item.piece) >= item.pieces).then_some(item)
    }

    /// Most instances of `item` the pool holds (nothing else placed).
    pub fn most(&self, item: Item) -> i64 {
        self.cap(item.gpu_type, item.piece) / item.pieces
    }

    // ---- node fill patterns --------------------------------------------------------------

    /// Every maximal multiset of `sizes` that fits a node of each class of type `t` (one
    /// list per class, in class order).
    pub fn patterns(&self, t: usize, sizes: &[i64]) -> Vec<Pattern> {
        let mut out = Vec::new();
        for (ci, c) in self.of_type(t) {
            let mut fit: Vec<i64> = sizes.iter().copied().filter(|&s| s <= c.free).collect();
            fit.sort_unstable_by(|a, b| b.cmp(a));
            fit.dedup();
            let mut cur = Vec::new();
            patterns_rec(&fit, 0, c.free, &mut cur, &mut |items| {
                out.push(Pattern {
                    class: ci,
                    items: items.to_vec(),
                })
            });
        }
        out
    }

    /// How many patterns [`Cluster::patterns`] would list for type `t`, counted without
    /// listing them (saturating at `u64::MAX`): a pattern is a multiset of `sizes` summing to
    /// at most a node's free GPUs with less than the smallest size left, so per class it is
    /// the number of multisets summing to `free - smallest + 1 ..= free` (coin-change counts,
    /// O(free · sizes)). Lets a caller refuse a node size whose patterns would not fit in
    /// memory (256-GPU nodes with sizes 1..32: ~500,000) before any is built.
    pub fn pattern_count(&self, t: usize, sizes: &[i64]) -> u64 {
        self.of_type(t)
            .map(|(_, c)| fill_count(c.free, sizes))
            .fold(0u64, u64::saturating_add)
    }

    /// The node size (free GPUs) of type `t` at most `free` whose pattern count is at most
    /// `limit` (the largest such), for a message saying what would be accepted.
    pub fn largest_node_within(free: i64, sizes: &[i64], limit: u64) -> i64 {
        (1..=free)
            .rev()
            .find(|&n| fill_count(n, sizes) <= limit)
            .unwrap_or(0)
    }

    // ---- exact packing ---------------------------------------------------------------------

    /// Whether `counts` (piece size → items) fit the nodes of type `t`; None when the sizes
    /// do not form a divisibility chain (no closed form).
    pub fn fits_chain(&self, t: usize, counts: &BTreeMap<i64, i64>) -> Option<bool> {
        let sizes: Vec<i64> = counts
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(&s, _)| s)
            .collect();
        if sizes.windows(2).any(|w| w[1] % w[0] != 0) {
            return None;
        }
        let mut above: i128 = 0; // GPUs of items of size >= s
        for &s in sizes.iter().rev() {
            above += s as i128 * counts[&s] as i128;
            if above > s as i128 * self.cap(t, s) as i128 {
                return Some(false);
            }
        }
        Some(true)
    }

    /// The most `small` items that fit on type `t` next to `n_large` items of size `large`
    /// (None: the large items alone do not fit). Exact; `Err(TooLarge)` when the search would
    /// exceed its budget. `small` and `large` need not divide each other.
    pub fn most_small(
        &self,
        t: usize,
        large: i64,
        n_large: i64,
        small: i64,
    ) -> Result<Option<i64>, TooLarge> {
        // As `spread`, without building the per-node arrangement (a hint asks this for
        // every pair and count: one vector per node each time was most of its cost).
        if n_large < 0 || large <= 0 || small <= 0 || self.cap(t, large) < n_large {
            return Ok(None);
        }
        if chain(large, small) && large % small == 0 {
            let room = self.cap(t, small) - n_large * (large / small);
            return Ok((room >= 0).then_some(room));
        }
        if !self.searches(t, large, small) {
            let classes: Vec<&NodeClass> = self.of_type(t).map(|(_, c)| c).collect();
            return Ok(fast_counts(&classes, large, n_large, small).map(|b| b.0));
        }
        if let Some(best) = self.table(t, large, small)? {
            let v = usize::try_from(n_large)
                .ok()
                .and_then(|q| best.get(q).copied());
            return Ok(v.filter(|&v| v != NONE));
        }
        Ok(self.spread(t, large, n_large, small)?.map(|(best, _)| best))
    }

    /// Whether [`Self::spread`] answers (`t`, `large`, `small`) by its dynamic programme
    /// (no closed form).
    fn searches(&self, t: usize, large: i64, small: i64) -> bool {
        if chain(large, small) {
            return large % small != 0;
        }
        let classes: Vec<&NodeClass> = self.of_type(t).map(|(_, c)| c).collect();
        let Some(first) = classes.first() else {
            return true; // no nodes: the (empty) programme answers
        };
        let fast = classes.len() == 1 || (classes.len() == 2 && classes[1].count == 1);
        !(fast && first.free / large <= 2)
    }

    /// The most small items next to every count of large ones, 0..=cap(large): one dynamic
    /// programme over the nodes, kept for the pool. None when it would exceed the search
    /// budget (the caller then searches for its one count).
    fn table(&self, t: usize, large: i64, small: i64) -> Result<Option<Arc<Vec<i64>>>, TooLarge> {
        let key = (t, large, small);
        if let Some(best) = self.tables.0.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(Some(best));
        }
        if past_deadline() {
            return Err(TooLarge);
        }
        let count: i64 = self.of_type(t).map(|(_, c)| c.count.max(0)).sum();
        let q = self.cap(t, large);
        let top = self
            .of_type(t)
            .map(|(_, c)| c.free / large)
            .max()
            .unwrap_or(0);
        let work = count
            .saturating_mul(q.saturating_add(1))
            .saturating_mul(top + 1);
        if work > SEARCH_BUDGET {
            return Ok(None);
        }
        let nodes: Vec<i64> = self
            .of_type(t)
            .flat_map(|(_, c)| std::iter::repeat_n(c.free, c.count.max(0) as usize))
            .collect();
        let mut best = vec![NONE; q as usize + 1];
        best[0] = 0;
        let mut reach = 0usize; // counts above this are still NONE
        for &f in &nodes {
            if past_deadline() {
                return Err(TooLarge);
            }
            let top = (f / large) as usize;
            reach = (reach + top).min(q as usize);
            // Descending k: best[k - i] for i ≥ 1 still holds the previous nodes' value.
            for k in (0..=reach).rev() {
                let mut v = NONE;
                for i in 0..=top.min(k) {
                    let prev = best[k - i];
                    if prev != NONE {
                        v = v.max(prev + (f - i as i64 * large) / small);
                    }
                }
                best[k] = v;
            }
        }
        let best = Arc::new(best);
        if let Ok(mut m) = self.tables.0.lock() {
            m.insert(key, best.clone());
        }
        Ok(Some(best))
    }

    /// [`Self::most_small`] and how many large items each node (in class order, each class's
    /// nodes in order) takes in one best arrangement.
    #[allow(clippy::type_complexity)]
    pub fn spread(
        &self,
        t: usize,
        large: i64,
        n_large: i64,
        small: i64,
    ) -> Result<Option<(i64, Vec<i64>)>, TooLarge> {
        if n_large < 0 || large <= 0 || small <= 0 {
            return Ok(None);
        }
        let classes: Vec<&NodeClass> = self.of_type(t).map(|(_, c)| c).collect();
        if self.cap(t, large) < n_large {
            return Ok(None);
        }
        if chain(large, small) {
            // Closed form: every arrangement of the large items leaves the same room.
            let mut counts = BTreeMap::new();
            counts.insert(large, n_large);
            let room = if large % small == 0 {
                self.cap(t, small) - n_large * (large / small)
            } else {
                // small is a multiple of large: the large items only spoil what is left
                // over in nodes below `small`, so pack them there first.
                return self.spread_search(&classes, large, n_large, small);
            };
            if room < 0 {
                return Ok(None);
            }
            let per_node = first_fit(&classes, large, n_large);
            return Ok(Some((room, per_node)));
        }
        // One class of identical nodes (+ at most one other node) with at most two large
        // items per node: the value is linear in how many nodes take two, so an end of its
        // range is optimal.
        let fast = classes.len() == 1 || (classes.len() == 2 && classes[1].count == 1);
        if fast && classes[0].free / large <= 2 {
            return Ok(self.spread_fast(&classes, large, n_large, small));
        }
        self.spread_search(&classes, large, n_large, small)
    }

    fn spread_fast(
        &self,
        classes: &[&NodeClass],
        large: i64,
        n_large: i64,
        small: i64,
    ) -> Option<(i64, Vec<i64>)> {
        let (value, c2, c1, ie) = fast_counts(classes, large, n_large, small)?;
        let n = classes[0].count;
        let mut per_node = Vec::with_capacity(n as usize + 1);
        per_node.extend(std::iter::repeat_n(2, c2 as usize));
        per_node.extend(std::iter::repeat_n(1, c1 as usize));
        per_node.extend(std::iter::repeat_n(0, (n - c1 - c2) as usize));
        if classes.len() > 1 {
            per_node.push(ie);
        }
        Some((value, per_node))
    }

    /// Exact dynamic programme over nodes: best[q] = most small items with q large items.
    fn spread_search(
        &self,
        classes: &[&NodeClass],
        large: i64,
        n_large: i64,
        small: i64,
    ) -> Result<Option<(i64, Vec<i64>)>, TooLarge> {
        let count: i64 = classes.iter().map(|c| c.count.max(0)).sum();
        let work = count.saturating_mul(n_large + 1);
        if work.saturating_mul(9) > SEARCH_BUDGET || past_deadline() {
            return Err(TooLarge);
        }
        let nodes: Vec<i64> = classes
            .iter()
            .flat_map(|c| std::iter::repeat_n(c.free, c.count.max(0) as usize))
            .collect();
        let q = n_large as usize;
        let mut best = vec![NONE; q + 1];
        best[0] = 0;
        let mut choice: Vec<Vec<u8>> = Vec::with_capacity(nodes.len());
        for &f in &nodes {
            if past_deadline() {
                return Err(TooLarge);
            }
            let top = (f / large) as usize;
            let mut next = vec![NONE; q + 1];
            let mut pick = vec![0u8; q + 1];
            for (k, slot) in next.iter_mut().enumerate() {
                for i in 0..=top.min(k) {
                    let prev = best[k - i];
                    if prev == NONE {
                        continue;
                    }
                    let v = prev + (f - i as i64 * large) / small;
                    if v > *slot {
                        *slot = v;
                        pick[k] = i as u8;
                    }
                }
            }
            best = next;
            choice.push(pick);
        }
        if best[q] == NONE {
            return Ok(None);
        }
        let mut per_node = vec![0i64; nodes.len()];
        let mut k = q;
        for n in (0..nodes.len()).rev() {
            let i = choice[n][k] as usize;
            per_node[n] = i as i64;
            k -= i;
        }
        Ok(Some((best[q], per_node)))
    }

    /// The most instances of `b` next to `na` instances of `a` (None: `na` of `a` do not
    /// fit). `exact == false` gives a valid relaxation instead (the per-size capacity cuts,
    /// exact for chain sizes) and never fails. `Err(TooLarge)`: the exact search was too large.
    pub fn most_beside(
        &self,
        a: Item,
        na: i64,
        b: Item,
        exact: bool,
    ) -> Result<Option<i64>, TooLarge> {
        if na < 0 {
            return Ok(None);
        }
        if a.gpu_type != b.gpu_type {
            if na.saturating_mul(a.pieces) > self.cap(a.gpu_type, a.piece) {
                return Ok(None);
            }
            return Ok(Some(self.most(b)));
        }
        let t = a.gpu_type;
        if !exact || chain(a.piece, b.piece) {
            return Ok(self.cut_room(t, a, na, b));
        }
        let (pa, pb) = (na.saturating_mul(a.pieces), b.pieces);
        if a.piece > b.piece {
            Ok(self.most_small(t, a.piece, pa, b.piece)?.map(|s| s / pb))
        } else {
            // b is the larger: the most nb whose pieces still leave room for `pa` a-pieces.
            let room_for = |nb: i64| -> Result<bool, TooLarge> {
                Ok(self
                    .most_small(t, b.piece, nb.saturating_mul(pb), a.piece)?
                    .is_some_and(|s| s >= pa))
            };
            if !room_for(0)? {
                return Ok(None);
            }
            let (mut lo, mut hi) = (0, self.most(b));
            while lo < hi {
                let mid = lo + (hi - lo + 1) / 2;
                if room_for(mid)? {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            Ok(Some(lo))
        }
    }

    /// The per-size capacity cuts: for every s in {1, a, b}, Σ ⌊piece/s⌋·pieces·n ≤ cap(s).
    fn cut_room(&self, t: usize, a: Item, na: i64, b: Item) -> Option<i64> {
        // In i64 where nothing can overflow (every pool pdtp plans): i128 division is a
        // library call, and the closed forms ask this for every count of every pair.
        let small = |it: Item| it.piece <= 1 << 16 && it.pieces <= 1 << 10;
        if (0..=1 << 31).contains(&na) && small(a) && small(b) {
            let mut room = i64::MAX;
            for s in [1, a.piece, b.piece] {
                let ca = (a.piece / s) * a.pieces;
                let cb = (b.piece / s) * b.pieces;
                let left = self.cap(t, s) - ca * na;
                if left < 0 {
                    return None;
                }
                if cb > 0 {
                    room = room.min(left / cb);
                }
            }
            return Some(room);
        }
        let mut room = i64::MAX;
        for s in [1, a.piece, b.piece] {
            let ca = (a.piece / s).saturating_mul(a.pieces) as i128;
            let cb = (b.piece / s).saturating_mul(b.pieces) as i128;
            let left = self.cap(t, s) as i128 - ca * na as i128;
            if left < 0 {
                return None;
            }
            if cb > 0 {
                room = room.min((left / cb).min(i64::MAX as i128) as i64);
            }
        }
        Some(room)
    }

    /// Whether one instance of `a` and one of `b` fit the pool together: an exact check of
    /// two counts, falling back to the search for decode instances beside one prefill
    /// instance where the exact check is too large (what every pairing of rows asks).
    pub fn one_of_each_fits(&self, a: Item, b: Item) -> bool {
        match self.fits(&[(a, 1), (b, 1)]) {
            Ok(ok) => ok,
            Err(TooLarge) => self
                .most_beside(a, 1, b, false)
                .ok()
                .flatten()
                .is_some_and(|n| n >= 1),
        }
    }

    /// Whether several instance kinds fit together: `need[i] = (item, instances)`. Exact
    /// per GPU type for divisibility chains and for two sizes; `Err(TooLarge)` otherwise.
    pub fn fits(&self, need: &[(Item, i64)]) -> Result<bool, TooLarge> {
        let mut per_type: BTreeMap<usize, BTreeMap<i64, i64>> = BTreeMap::new();
        for &(item, n) in need {
            if n > 0 {
                *per_type
                    .entry(item.gpu_type)
                    .or_default()
                    .entry(item.piece)
                    .or_default() += n.saturating_mul(item.pieces);
            }
        }
        for (t, counts) in &per_type {
            match self.fits_chain(*t, counts) {
                Some(true) => {}
                Some(false) => return Ok(false),
                None if counts.len() == 2 => {
                    let (&small, &ns) = counts.iter().next().unwrap();
                    let (&large, &nl) = counts.iter().next_back().unwrap();
                    if self
                        .most_small(*t, large, nl, small)?
                        .is_none_or(|room| room < ns)
                    {
                        return Ok(false);
                    }
                }
                None => return Err(TooLarge),
            }
        }
        Ok(true)
    }

    /// How many nodes of each class end up with each content when `counts` (piece size →
    /// items, a divisibility chain) are placed first fit, largest first: `(class, contents
    /// as (size, items) descending, nodes)`. Works on runs of identical nodes, so its cost
    /// does not grow with the number of nodes or items. None: the sizes are not a chain or
    /// do not fit.
    #[allow(clippy::type_complexity)]
    pub fn fill_runs(
        &self,
        t: usize,
        counts: &BTreeMap<i64, i64>,
    ) -> Option<Vec<(usize, Vec<(i64, i64)>, i64)>> {
        let active: Vec<(i64, i64)> = counts
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(&s, &n)| (s, n))
            .collect();
        if active.windows(2).any(|w| w[1].0 % w[0].0 != 0) {
            return None;
        }
        // Runs in node order: (class, nodes, free left, contents).
        let mut runs: Vec<(usize, i64, i64, Vec<(i64, i64)>)> = self
            .of_type(t)
            .map(|(ci, c)| (ci, c.count, c.free, Vec::new()))
            .collect();
        for &(s, n) in active.iter().rev() {
            let mut left = n;
            let mut next = Vec::with_capacity(runs.len() + 2);
            for (ci, count, free, contents) in runs {
                let per = free / s;
                if left == 0 || per == 0 {
                    next.push((ci, count, free, contents));
                    continue;
                }
                let full = (left / per).min(count);
                let with = |k: i64| {
                    let mut c = contents.clone();
                    c.push((s, k));
                    c
                };
                if full > 0 {
                    next.push((ci, full, free - per * s, with(per)));
                    left -= full * per;
                }
                let rest = count - full;
                if rest > 0 && left > 0 {
                    // left < per here: one node takes the remainder
                    next.push((ci, 1, free - left * s, with(left)));
                    left = 0;
                    if rest > 1 {
                        next.push((ci, rest - 1, free, contents));
                    }
                } else if rest > 0 {
                    next.push((ci, rest, free, contents));
                }
            }
            if left > 0 {
                return None;
            }
            runs = next;
        }
        Some(
            runs.into_iter()
                .filter(|r| !r.3.is_empty())
                .map(|(ci, count, _, contents)| (ci, contents, count))
                .collect(),
        )
    }

    /// Which node each item goes to: for every GPU type, `placed[k]` lists the caller's
    /// node number of each of the `counts[k]` items of `sizes[k]`, in order. Exact for
    /// chains (first fit, largest first) and two sizes; `Err(TooLarge)` otherwise.
    pub fn place(
        &self,
        t: usize,
        counts: &BTreeMap<i64, i64>,
    ) -> Result<BTreeMap<i64, Vec<usize>>, TooLarge> {
        let classes: Vec<(usize, &NodeClass)> = self.of_type(t).collect();
        let nodes: Vec<(usize, i64)> = classes
            .iter()
            .flat_map(|(ci, c)| self.node_ids[*ci].iter().map(move |&id| (id, c.free)))
            .collect();
        let mut free: Vec<i64> = nodes.iter().map(|n| n.1).collect();
        let mut out: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        let active: Vec<(i64, i64)> = counts
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(&s, &n)| (s, n))
            .collect();
        let is_chain = active.windows(2).all(|w| w[1].0 % w[0].0 == 0);
        if !is_chain {
            if active.len() != 2 {
                return Err(TooLarge);
            }
            let ((small, ns), (large, nl)) = (active[0], active[1]);
            let per_node = match self.spread(t, large, nl, small)? {
                Some((room, per_node)) if room >= ns => per_node,
                _ => return Err(TooLarge),
            };
            let mut large_at = Vec::new();
            for (n, &k) in per_node.iter().enumerate() {
                for _ in 0..k {
                    large_at.push(nodes[n].0);
                }
                free[n] -= k * large;
            }
            out.insert(large, large_at);
            out.insert(small, fill(&nodes, &mut free, small, ns).ok_or(TooLarge)?);
            return Ok(out);
        }
        for &(s, n) in active.iter().rev() {
            out.insert(s, fill(&nodes, &mut free, s, n).ok_or(TooLarge)?);
        }
        Ok(out)
    }
}

/// One class of identical nodes (+ at most one other node), at most two large items per
/// node: the most small items next to `n_large` large ones, how many nodes take two and
/// one, and the extra node's count — `(value, c2, c1, extra)`.
fn fast_counts(
    classes: &[&NodeClass],
    large: i64,
    n_large: i64,
    small: i64,
) -> Option<(i64, i64, i64, i64)> {
    let main = classes[0];
    let (n, f) = (main.count, main.free);
    let s_of = |free: i64, i: i64| (free - i * large) / small;
    let extra = classes.get(1).map(|c| c.free);
    let extra_max = extra.map_or(0, |e| e / large);
    let mut best: Option<(i64, i64, i64, i64)> = None; // (value, c2, c1, extra i)
    for ie in 0..=extra_max.min(n_large) {
        let q = n_large - ie;
        let ext = extra.map_or(0, |e| s_of(e, ie));
        let cap_i = f / large;
        let (c2, c1, value) = match cap_i {
            0 if q == 0 => (0, 0, n * s_of(f, 0)),
            1 if q <= n => (0, q, (n - q) * s_of(f, 0) + q * s_of(f, 1)),
            2 if q <= 2 * n => {
                let (lo, hi) = ((q - n).max(0), q / 2);
                let value = |c2: i64| {
                    let c1 = q - 2 * c2;
                    (n - c1 - c2) * s_of(f, 0) + c1 * s_of(f, 1) + c2 * s_of(f, 2)
                };
                let c2 = if value(hi) >= value(lo) { hi } else { lo };
                (c2, q - 2 * c2, value(c2))
            }
            _ => continue,
        };
        if best.is_none_or(|b| value + ext > b.0) {
            best = Some((value + ext, c2, c1, ie));
        }
    }
    best
}

/// Exact packing, or the relaxation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Exact,
    Relaxed,
}

/// The most decode instances next to `np` prefill instances of a pair (None: `np` do not
/// fit); `Err(TooLarge)` when an exact search would be too large.
pub fn room(cl: &Cluster, a: Item, np: i64, b: Item, fit: Fit) -> Result<Option<i64>, TooLarge> {
    cl.most_beside(a, np, b, fit == Fit::Exact)
}

/// The most one pair serves (capacity units `ua`, `ub` per instance) and the fewest
/// instances that serve it: `(np, nd, value)`.
pub fn most_served(
    ua: i64,
    ub: i64,
    most_a: i64,
    room: &dyn Fn(i64) -> Result<Option<i64>, TooLarge>,
) -> Result<Option<(i64, i64, i64)>, TooLarge> {
    if ua <= 0 || ub <= 0 {
        return Ok(None);
    }
    let fits = |np: i64| -> Result<Option<i64>, TooLarge> { Ok(room(np)?.filter(|&n| n >= 1)) };
    if fits(1)?.is_none() {
        return Ok(None);
    }
    // Largest np that still leaves room for one decode instance.
    let (mut lo, mut hi) = (1_i64, most_a.max(1));
    while lo < hi {
        let mid = lo + (hi - lo + 1) / 2;
        if fits(mid)?.is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let np_max = lo;
    // Largest np with np·A ≤ room(np)·B (0 when even one prefill instance out-serves all
    // the decode room).
    let balanced = |np: i64| -> Result<bool, TooLarge> {
        Ok(fits(np)?.is_some_and(|nd| (np as i128) * (ua as i128) <= (nd as i128) * (ub as i128)))
    };
    let (mut lo, mut hi) = (0_i64, np_max);
    while lo < hi {
        let mid = lo + (hi - lo + 1) / 2;
        if balanced(mid)? {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut best = 0_i64;
    for np in [lo, lo + 1] {
        if (1..=np_max).contains(&np) {
            if let Some(nd) = fits(np)? {
                best = best.max(np.saturating_mul(ua).min(nd.saturating_mul(ub)));
            }
        }
    }
    if best <= 0 {
        return Ok(None);
    }
    Ok(Some(((best + ua - 1) / ua, (best + ub - 1) / ub, best)))
}

/// Put `n` items of `s` GPUs into nodes in order, as many per node as fit.
fn fill(nodes: &[(usize, i64)], free: &mut [i64], s: i64, n: i64) -> Option<Vec<usize>> {
    let mut at = Vec::with_capacity(n.max(0) as usize);
    let mut left = n;
    for (i, node) in nodes.iter().enumerate() {
        if left == 0 {
            break;
        }
        let k = (free[i] / s).min(left);
        if k > 0 {
            at.extend(std::iter::repeat_n(node.0, k as usize));
            free[i] -= k * s;
            left -= k;
        }
    }
    (left == 0).then_some(at)
}

/// How many of `n` items of `s` each node takes, first fit in order.
fn first_fit(classes: &[&NodeClass], s: i64, n: i64) -> Vec<i64> {
    let mut left = n;
    let mut out = Vec::new();
    for c in classes {
        for _ in 0..c.count {
            let k = (c.free / s).min(left);
            out.push(k);
            left -= k;
        }
    }
    out
}

/// Maximal multisets of `sizes` (those ≤ `free`) filling a node of `free` GPUs: what
/// `patterns_rec` emits, counted (saturating).
fn fill_count(free: i64, sizes: &[i64]) -> u64 {
    let mut fit: Vec<i64> = sizes
        .iter()
        .copied()
        .filter(|&s| s >= 1 && s <= free)
        .collect();
    fit.sort_unstable();
    fit.dedup();
    let Some(&smallest) = fit.first() else {
        return 1; // nothing fits: one empty pattern
    };
    let n = free.max(0) as usize;
    let mut ways = vec![0u64; n + 1];
    ways[0] = 1;
    for &s in &fit {
        for total in s as usize..=n {
            ways[total] = ways[total].saturating_add(ways[total - s as usize]);
        }
    }
    let low = (free - smallest + 1).max(0) as usize;
    ways[low..=n].iter().fold(0u64, |a, &b| a.saturating_add(b))
}

type Emit<'a> = &'a mut dyn FnMut(&[(i64, i64)]);

fn patterns_rec(fit: &[i64], i: usize, left: i64, cur: &mut Vec<(i64, i64)>, emit: Emit<'_>) {
    if i == fit.len() {
        if fit.iter().all(|&s| s > left) {
            emit(cur);
        }
        return;
    }
    let s = fit[i];
    for k in (0..=left / s).rev() {
        if k > 0 {
            cur.push((s, k));
        }
        patterns_rec(fit, i + 1, left - k * s, cur, emit);
        if k > 0 {
            cur.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(nodes: &[(usize, i64, i64)], node_size: &[i64]) -> Cluster {
        let mut classes: Vec<NodeClass> = Vec::new();
        let mut ids = Vec::new();
        let mut next = 0;
        for &(t, free, count) in nodes {
            classes.push(NodeClass {
                gpu_type: t,
                free,
                count,
            });
            ids.push((next..next + count as usize).collect());
            next += count as usize;
        }
        Cluster {
            classes,
            node_ids: ids,
            node_size: node_size.to_vec(),
            tables: Tables::default(),
            caps: Vec::new(),
        }
        .with_caps()
    }

    /// Brute force: every way to give each node some large items.
    fn brute_most_small(frees: &[i64], large: i64, n_large: i64, small: i64) -> Option<i64> {
        fn rec(frees: &[i64], large: i64, left: i64, small: i64) -> Option<i64> {
            if frees.is_empty() {
                return (left == 0).then_some(0);
            }
            let mut best = None;
            for i in 0..=(frees[0] / large).min(left) {
                if let Some(rest) = rec(&frees[1..], large, left - i, small) {
                    let v = rest + (frees[0] - i * large) / small;
                    best = best.max(Some(v));
                }
            }
            best
        }
        rec(frees, large, n_large, small)
    }

    #[test]
    fn most_small_matches_brute_force() {
        let layouts: &[&[(usize, i64, i64)]] = &[
            &[(0, 8, 3)],
            &[(0, 8, 4), (0, 5, 1)],
            &[(0, 8, 2), (0, 5, 1), (0, 3, 2), (0, 7, 1)],
            &[(0, 6, 3), (0, 4, 1)],
        ];
        for nodes in layouts {
            let cl = cluster(nodes, &[8]);
            let frees: Vec<i64> = nodes
                .iter()
                .flat_map(|&(_, f, c)| std::iter::repeat_n(f, c as usize))
                .collect();
            for (large, small) in [
                (3, 2),
                (5, 2),
                (5, 4),
                (3, 8),
                (6, 4),
                (4, 2),
                (2, 1),
                (7, 3),
                (8, 3),
            ] {
                for n in 0..12 {
                    let got = cl.most_small(0, large, n, small).unwrap();
                    assert_eq!(
                        got,
                        brute_most_small(&frees, large, n, small),
                        "{nodes:?} {large} {n} {small}"
                    );
                    if let Some((v, per_node)) = cl.spread(0, large, n, small).unwrap() {
                        assert_eq!(per_node.iter().sum::<i64>(), n);
                        let got: i64 = frees
                            .iter()
                            .zip(&per_node)
                            .map(|(f, k)| (f - k * large) / small)
                            .sum();
                        assert!(got >= v);
                    }
                }
            }
        }
    }

    #[test]
    fn pattern_count_matches_the_listing() {
        for (free, sizes) in [
            (8, vec![1, 2, 4, 8]),
            (7, vec![2, 3]),
            (24, vec![1, 2, 3, 4, 6, 8, 12]),
            (5, vec![8]),
            (64, vec![1, 2, 4, 8, 16, 32]),
        ] {
            let cl = cluster(&[(0, free, 3), (0, free - 1, 1)], &[free]);
            assert_eq!(
                cl.pattern_count(0, &sizes),
                cl.patterns(0, &sizes).len() as u64,
                "{free} {sizes:?}"
            );
        }
        // 256-GPU nodes with sizes 1..32: counted in microseconds, far past any bound.
        let cl = cluster(&[(0, 256, 1)], &[256]);
        assert!(cl.pattern_count(0, &[1, 2, 4, 8, 16, 32]) > 100_000);
        let sizes = [1, 2, 4, 8, 16, 32];
        let n = Cluster::largest_node_within(256, &sizes, 1827);
        assert!((64..256).contains(&n));
        assert!(fill_count(n, &sizes) <= 1827 && fill_count(n + 1, &sizes) > 1827);
    }

    #[test]
    fn cached_tables_answer_as_the_search_for_each_count() {
        // Many partly free nodes: most_small reads the pool's table, spread searches anew.
        let nodes: Vec<(usize, i64, i64)> = (1..=8).map(|f| (0, f, 3 + f % 4)).collect();
        let cl = cluster(&nodes, &[8]);
        for (large, small) in [(3, 2), (5, 2), (3, 4), (6, 4), (7, 3), (3, 6)] {
            for n in 0..=cl.cap(0, large) + 1 {
                let table = cl.most_small(0, large, n, small).unwrap();
                let search = cl.spread(0, large, n, small).unwrap().map(|(v, _)| v);
                assert_eq!(table, search, "{large} {n} {small}");
            }
        }
    }

    #[test]
    fn a_passed_deadline_ends_exact_searches() {
        let nodes: Vec<(usize, i64, i64)> = (1..=8).map(|f| (0, f, 40)).collect();
        let cl = cluster(&nodes, &[8]);
        {
            let _limit = until(Some(Instant::now()));
            assert!(past_deadline());
            assert_eq!(cl.most_small(0, 3, 10, 2), Err(TooLarge));
            assert_eq!(cl.spread(0, 3, 10, 2), Err(TooLarge));
            // Closed forms need no search and still answer.
            assert!(cl.most_small(0, 4, 10, 2).is_ok());
        }
        assert!(!past_deadline()); // the guard is gone: searches run again
        assert!(cl.most_small(0, 3, 10, 2).unwrap().is_some());
    }

    #[test]
    fn chain_criterion_and_patterns() {
        let cl = cluster(&[(0, 8, 2), (0, 5, 1), (0, 3, 1)], &[8]);
        let mut c = BTreeMap::new();
        c.insert(4, 3); // 4 fours: two nodes of 8 hold 4, the 5 holds 1 -> 5 slots
        c.insert(2, 3);
        assert_eq!(cl.fits_chain(0, &c), Some(true));
        c.insert(4, 6);
        assert_eq!(cl.fits_chain(0, &c), Some(false));
        let pats = cl.patterns(0, &[1, 2, 4, 8]);
        assert_eq!(pats.iter().filter(|p| p.class == 0).count(), 10); // partitions of 8 into powers of 2
        assert!(pats
            .iter()
            .all(|p| p.items.iter().map(|(s, k)| s * k).sum::<i64>() <= cl.classes[p.class].free));
        let placed = cl.place(0, &c).err();
        assert!(placed.is_some() || cl.fits_chain(0, &c) == Some(true));
    }

    #[test]
    fn fill_runs_match_the_node_by_node_placement() {
        let cl = cluster(&[(0, 8, 3), (0, 5, 1), (0, 8, 2), (0, 2, 1)], &[8]);
        for counts in [
            vec![(8, 2), (4, 3), (2, 4), (1, 3)],
            vec![(4, 7)],
            vec![(2, 9), (1, 9)],
            vec![(8, 5)],
        ] {
            let counts: BTreeMap<i64, i64> = counts.into_iter().collect();
            let runs = cl.fill_runs(0, &counts);
            let placed = cl.place(0, &counts);
            assert_eq!(runs.is_some(), placed.is_ok(), "{counts:?}");
            let (Some(runs), Ok(placed)) = (runs, placed) else {
                continue;
            };
            // Per node contents from the placement, as a multiset of contents.
            let mut per_node: BTreeMap<usize, BTreeMap<i64, i64>> = BTreeMap::new();
            for (s, nodes) in &placed {
                for &n in nodes {
                    *per_node.entry(n).or_default().entry(*s).or_default() += 1;
                }
            }
            let mut from_place: Vec<Vec<(i64, i64)>> = per_node
                .values()
                .map(|c| c.iter().rev().map(|(&s, &k)| (s, k)).collect())
                .collect();
            let mut from_runs: Vec<Vec<(i64, i64)>> = runs
                .iter()
                .flat_map(|(_, c, n)| std::iter::repeat_n(c.clone(), *n as usize))
                .collect();
            from_place.sort();
            from_runs.sort();
            assert_eq!(from_place, from_runs, "{counts:?}");
        }
    }

    #[test]
    fn spanning_items_take_whole_nodes() {
        let cl = cluster(&[(0, 8, 3), (0, 4, 1)], &[8]);
        let item = cl.item(0, 16).unwrap();
        assert_eq!((item.piece, item.pieces), (8, 2));
        assert_eq!(cl.most(item), 1);
        assert!(cl.item(0, 12).is_none());
    }
}
