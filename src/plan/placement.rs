//! Where a plan's instances run: every GPU type's items placed by the exact closed forms
//! (`Cluster::place`), else by the node-pattern usage a CP-SAT solution gives; the same
//! placement for a plan read without one (`pack`: the fewest whole nodes that hold it);
//! and the pattern usage of a plan (the node part of a complete CP-SAT hint). This is
//! pdtp's one node-packing routine: the planners, `Plan.placement()` and `pdtp deploy` of a
//! plan that lists no placement all place instances here.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::candidates::Candidates;
use super::cluster::{Cluster, Pattern, TooLarge};
use super::order::Solution;
use super::scenario::Role;

/// One instance's place: its node (the first of `nodes` when it spans whole nodes), GPU
/// type, model, role, index within its role and the devices it uses on each of its nodes
/// (a node's free devices counted from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub node: usize,
    pub nodes: Vec<usize>,
    pub gpu_type: usize,
    pub model: usize,
    pub role: &'static str,
    pub index: i64,
    pub devices: Vec<i64>,
}

/// Instances → nodes: every GPU type's items by the exact closed forms, else by the
/// pattern usage a CP-SAT solution gives. Linear in nodes and instances.
pub fn place(
    c: &Candidates,
    sol: &Solution,
    usage: Option<&[(usize, i64)]>,
) -> Option<Vec<Placed>> {
    // Items in plan order: (type, piece, (model, role, index)).
    let mut items: Vec<PlanItem> = Vec::new();
    for (m, ch) in sol.iter().enumerate() {
        let Some(ch) = ch else { continue };
        for (row, n) in ch.parts() {
            let r = &c.rows[row];
            let it = r.item?;
            for i in 0..n {
                for _ in 0..it.pieces {
                    items.push((it.gpu_type, it.piece, m, r.role.name(), i));
                }
            }
        }
    }
    let types = c.scenario.gpu_types.len();
    // Per type: node number of each item of each size, in order.
    let mut slots: Vec<BTreeMap<i64, VecDeque<usize>>> = Vec::new();
    let patterns: Vec<Pattern> = (0..types)
        .flat_map(|t| c.cluster.patterns(t, &c.sizes[t]))
        .collect();
    for t in 0..types {
        let mut counts = BTreeMap::new();
        for it in items.iter().filter(|it| it.0 == t) {
            *counts.entry(it.1).or_insert(0i64) += 1;
        }
        let placed = match c.cluster.place(t, &counts) {
            Ok(p) => p,
            Err(TooLarge) => by_patterns(c, t, &counts, &patterns, usage?)?,
        };
        slots.push(placed.into_iter().map(|(s, v)| (s, v.into())).collect());
    }
    with_devices(&items, &mut slots)
}

/// Items (type, piece, model, role, index) in plan order, their nodes taken in order from
/// `slots` (per type: piece size → node of each item): each node hands out its free
/// devices in order, an instance spanning whole nodes the same devices of each.
type PlanItem = (usize, i64, usize, &'static str, i64);

fn with_devices(
    items: &[PlanItem],
    slots: &mut [BTreeMap<i64, VecDeque<usize>>],
) -> Option<Vec<Placed>> {
    let mut next_device: HashMap<usize, i64> = HashMap::new();
    let mut out: Vec<Placed> = Vec::new();
    let mut k = 0;
    while k < items.len() {
        let (t, piece, m, role, index) = items[k];
        let mut run = k;
        while run < items.len()
            && items[run].2 == m
            && items[run].3 == role
            && items[run].4 == index
        {
            run += 1;
        }
        // One instance: `run - k` items (several only when it spans whole nodes, each the
        // same devices of another node).
        let mut devices = Vec::new();
        let mut nodes = Vec::new();
        for _ in k..run {
            let node = slots[t].get_mut(&piece)?.pop_front()?;
            let start = next_device.entry(node).or_insert(0);
            devices = (*start..*start + piece).collect();
            *start += piece;
            nodes.push(node);
        }
        out.push(Placed {
            node: nodes[0],
            nodes,
            gpu_type: t,
            model: m,
            role,
            index,
            devices,
        });
        k = run;
    }
    Some(out)
}

/// Why [`pack`] cannot place a plan's instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackError {
    /// Nodes of fewer than one GPU.
    NodeSize(i64),
    /// An instance of `gpus` GPUs (the `index`-th listed): less than one GPU, or larger than
    /// a node and not whole nodes.
    Instance { index: usize, gpus: i64 },
    /// Sizes no closed form packs (more than two that do not divide each other).
    Unplaced,
}

impl std::fmt::Display for PackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PackError::NodeSize(n) => write!(f, "gpus_per_node must be at least 1, got {n}"),
            PackError::Instance { gpus, .. } if *gpus < 1 => {
                write!(f, "an instance needs at least one GPU, got {gpus}")
            }
            PackError::Instance { gpus, .. } => write!(
                f,
                "an instance of {gpus} GPUs is neither within one node nor whole nodes"
            ),
            PackError::Unplaced => write!(
                f,
                "these instance sizes have no closed-form placement (more than two sizes \
                 that do not divide each other)"
            ),
        }
    }
}

/// A plan's instances `(role, GPUs)`, in plan order, on nodes of `node_size` free GPUs when
/// the plan lists no placement: the planners' own placement (`Cluster::place`, largest items
/// first, each on the first node with room) on the fewest whole nodes that hold them. So a
/// plan solved on whole nodes is placed as the planner placed it, and partly used nodes are
/// filled before a new one is opened. Indices count within each role; an instance larger
/// than a node takes whole nodes.
pub fn pack(instances: &[(Role, i64)], node_size: i64) -> Result<Vec<Placed>, PackError> {
    if node_size < 1 {
        return Err(PackError::NodeSize(node_size));
    }
    let mut items: Vec<PlanItem> = Vec::new();
    let mut per_role: HashMap<Role, i64> = HashMap::new();
    let mut counts: BTreeMap<i64, i64> = BTreeMap::new();
    for (k, &(role, gpus)) in instances.iter().enumerate() {
        let (piece, pieces) = if (1..=node_size).contains(&gpus) {
            (gpus, 1)
        } else if gpus > node_size && gpus % node_size == 0 {
            (node_size, gpus / node_size)
        } else {
            return Err(PackError::Instance { index: k, gpus });
        };
        let index = per_role.entry(role).or_insert(0);
        for _ in 0..pieces {
            items.push((0, piece, 0, role.name(), *index));
        }
        *index += 1;
        *counts.entry(piece).or_insert(0) += pieces;
    }
    let total: i64 = counts.iter().map(|(s, n)| s * n).sum();
    let pieces = items.len() as i64;
    // One piece per node always packs; the fewest nodes usually do (sizes that do not
    // divide the node may need one or two more).
    for nodes in (total + node_size - 1) / node_size..=pieces {
        let cluster = Cluster::uniform(node_size, nodes * node_size);
        if let Ok(placed) = cluster.place(0, &counts) {
            let mut slots = vec![placed.into_iter().map(|(s, v)| (s, v.into())).collect()];
            if let Some(out) = with_devices(&items, &mut slots) {
                return Ok(out);
            }
        }
    }
    // Only item sizes no closed form packs (three or more that do not divide each other)
    // get here: a plan has at most two.
    Err(PackError::Unplaced)
}

/// Each node's contents mapped to a pattern of its class that holds them: by runs of
/// identical nodes where the sizes form a chain (cost independent of the pool's size), else
/// from the full placement.
pub fn pattern_usage(c: &Candidates, sol: &Solution) -> Option<Vec<(usize, i64)>> {
    let types = c.scenario.gpu_types.len();
    let patterns: Vec<Pattern> = (0..types)
        .flat_map(|t| c.cluster.patterns(t, &c.sizes[t]))
        .collect();
    let mut per_type: Vec<BTreeMap<i64, i64>> = vec![Default::default(); types];
    for ch in sol.iter().flatten() {
        for (row, n) in ch.parts() {
            let it = c.rows[row].item?;
            *per_type[it.gpu_type].entry(it.piece).or_default() += n * it.pieces;
        }
    }
    let runs: Option<Vec<_>> = (0..types)
        .map(|t| c.cluster.fill_runs(t, &per_type[t]))
        .collect();
    if let Some(runs) = runs {
        let mut counts: BTreeMap<usize, i64> = Default::default();
        for (class, contents, nodes) in runs.into_iter().flatten() {
            let j = patterns.iter().position(|p| {
                p.class == class
                    && contents.iter().all(|(s, k)| {
                        p.items
                            .iter()
                            .find(|(ps, _)| ps == s)
                            .is_some_and(|(_, pk)| pk >= k)
                    })
            })?;
            *counts.entry(j).or_default() += nodes;
        }
        return Some(counts.into_iter().collect());
    }
    let placed = place(c, sol, None)?;
    let node_class: HashMap<usize, usize> = c
        .cluster
        .node_ids
        .iter()
        .enumerate()
        .flat_map(|(ci, ids)| ids.iter().map(move |&n| (n, ci)))
        .collect();
    let mut content: BTreeMap<usize, BTreeMap<i64, i64>> = BTreeMap::new();
    for p in &placed {
        for &node in &p.nodes {
            *content
                .entry(node)
                .or_default()
                .entry(p.devices.len() as i64)
                .or_default() += 1;
        }
    }
    let patterns: Vec<Pattern> = (0..c.scenario.gpu_types.len())
        .flat_map(|t| c.cluster.patterns(t, &c.sizes[t]))
        .collect();
    let mut counts: BTreeMap<usize, i64> = BTreeMap::new();
    for (node, items) in content {
        let class = *node_class.get(&node)?;
        let j = patterns.iter().position(|p| {
            p.class == class
                && items.iter().all(|(s, k)| {
                    p.items
                        .iter()
                        .find(|(ps, _)| ps == s)
                        .is_some_and(|(_, pk)| pk >= k)
                })
        })?;
        *counts.entry(j).or_default() += 1;
    }
    Some(counts.into_iter().collect())
}

fn by_patterns(
    c: &Candidates,
    t: usize,
    counts: &BTreeMap<i64, i64>,
    patterns: &[Pattern],
    usage: &[(usize, i64)],
) -> Option<BTreeMap<i64, Vec<usize>>> {
    let mut used_in_class: HashMap<usize, usize> = HashMap::new();
    let mut out: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for &(pi, n) in usage {
        let p = patterns.get(pi)?;
        if c.cluster.classes[p.class].gpu_type != t {
            continue;
        }
        for _ in 0..n {
            let used = used_in_class.entry(p.class).or_insert(0);
            let node = *c.cluster.node_ids[p.class].get(*used)?;
            *used += 1;
            for &(s, k) in &p.items {
                out.entry(s)
                    .or_default()
                    .extend(std::iter::repeat_n(node, k as usize));
            }
        }
    }
    for (s, &n) in counts {
        let v = out.entry(*s).or_default();
        if (v.len() as i64) < n {
            return None;
        }
        v.truncate(n as usize);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::tests::{h100, llama70, workload};
    use crate::plan::oracle::search;
    use crate::plan::order::Order;
    use crate::plan::scenario::{Objective, Vendor};
    use crate::plan::tests::{five, gpu_type, model, scenario, small, small_moe};
    use std::collections::HashSet;

    /// Oracle-best plans on pools with whole, partial and partly free nodes of one or two
    /// GPU types (sizes that do not divide the node included).
    fn planned() -> Vec<(Candidates, Solution)> {
        let pools: &[&[(usize, i64, i64)]] = &[
            &[(0, 8, 1)],
            &[(0, 8, 2), (0, 5, 1)],
            &[(0, 8, 1), (0, 5, 2), (0, 3, 1)],
            &[(0, 6, 2), (0, 4, 1)],
            &[(0, 8, 1), (1, 8, 1), (1, 3, 1)],
        ];
        let mut out = Vec::new();
        for perf in [llama70(), small(4), five(), small_moe()] {
            for nodes in pools {
                let two = nodes.iter().any(|n| n.0 == 1);
                let (gpus, types) = if two {
                    (
                        vec![h100(), h100()],
                        vec![
                            gpu_type("a", Vendor::Nvidia, 30_000),
                            gpu_type("b", Vendor::Nvidia, 20_000),
                        ],
                    )
                } else {
                    (vec![h100()], vec![gpu_type("a", Vendor::Nvidia, 30_000)])
                };
                let sc = scenario(
                    vec![model(perf, &gpus, workload(), 0.0)],
                    types,
                    nodes,
                    "nixl",
                    Objective::Throughput,
                );
                let c = Candidates::build(sc);
                let order = Order::new(&c);
                if let (Some(sol), _) = search(&c, &order, None, true) {
                    out.push((c, sol));
                }
            }
        }
        assert!(out.len() >= 12, "{} plans", out.len());
        out
    }

    /// Every instance of the plan placed exactly once, on nodes of its GPU type, with its
    /// piece's devices on each node within that node's free GPUs, no device used twice.
    fn assert_valid(c: &Candidates, sol: &Solution, placed: &[Placed]) {
        let class_of: HashMap<usize, usize> = c
            .cluster
            .node_ids
            .iter()
            .enumerate()
            .flat_map(|(ci, ids)| ids.iter().map(move |&n| (n, ci)))
            .collect();
        let mut want: HashSet<(usize, &'static str, i64)> = HashSet::new();
        for (m, ch) in sol.iter().enumerate() {
            for (row, n) in ch.iter().flat_map(|ch| ch.parts()) {
                let r = &c.rows[row];
                want.extend((0..n).map(|i| (m, r.role.name(), i)));
                for p in placed
                    .iter()
                    .filter(|p| p.model == m && p.role == r.role.name())
                {
                    let it = r.item.unwrap();
                    assert_eq!(p.gpu_type, it.gpu_type);
                    assert_eq!(p.devices.len() as i64, it.piece);
                    assert_eq!(p.nodes.len() as i64, it.pieces);
                    assert_eq!(p.node, p.nodes[0]);
                }
            }
        }
        let got: HashSet<_> = placed.iter().map(|p| (p.model, p.role, p.index)).collect();
        assert_eq!(got.len(), placed.len(), "an instance placed twice");
        assert_eq!(got, want);
        let mut used = HashSet::new();
        for p in placed {
            for &node in &p.nodes {
                let class = &c.cluster.classes[class_of[&node]];
                assert_eq!(class.gpu_type, p.gpu_type);
                for &d in &p.devices {
                    assert!((0..class.free).contains(&d), "device {d} of node {node}");
                    assert!(
                        used.insert((node, d)),
                        "device {d} of node {node} used twice"
                    );
                }
            }
        }
    }

    #[test]
    fn every_instance_gets_its_own_devices() {
        for (c, sol) in planned() {
            let placed = place(&c, &sol, None).expect("a feasible plan places");
            assert_valid(&c, &sol, &placed);
        }
    }

    #[test]
    fn pattern_usage_fits_the_pool_and_places_the_plan() {
        for (c, sol) in planned() {
            let usage = pattern_usage(&c, &sol).expect("a feasible plan has a usage");
            let patterns: Vec<Pattern> = (0..c.scenario.gpu_types.len())
                .flat_map(|t| c.cluster.patterns(t, &c.sizes[t]))
                .collect();
            let mut per_class = vec![0; c.cluster.classes.len()];
            for &(j, n) in &usage {
                per_class[patterns[j].class] += n;
            }
            for (k, class) in c.cluster.classes.iter().enumerate() {
                assert!(per_class[k] <= class.count, "class {k}: {per_class:?}");
            }
            // The CP-SAT path: the same plan placed from the pattern usage alone.
            for t in 0..c.scenario.gpu_types.len() {
                let mut counts = BTreeMap::new();
                for (row, n) in sol.iter().flatten().flat_map(|ch| ch.parts()) {
                    let it = c.rows[row].item.unwrap();
                    if it.gpu_type == t {
                        *counts.entry(it.piece).or_insert(0) += n * it.pieces;
                    }
                }
                let slots = by_patterns(&c, t, &counts, &patterns, &usage).expect("usage holds it");
                for (s, n) in &counts {
                    assert_eq!(slots[s].len() as i64, *n);
                }
            }
        }
    }

    #[test]
    fn a_plan_too_large_for_the_pool_is_not_placed() {
        let (c, sol) = planned().remove(0);
        let mut more = sol.clone();
        let ch = more[0].as_mut().unwrap();
        ch.prefill += 64;
        ch.decode += 64;
        assert_eq!(place(&c, &more, None), None);
        assert_eq!(
            by_patterns(&c, 0, &BTreeMap::from([(1, 1 << 20)]), &[], &[]),
            None
        );
    }

    /// One packing checked: every instance listed once, in order, indices counted per role,
    /// its GPUs on its own devices of each of its nodes (whole nodes when it spans several).
    fn check_pack(instances: &[(Role, i64)], node: i64, placed: &[Placed]) -> usize {
        assert_eq!(placed.len(), instances.len());
        let mut used = HashSet::new();
        let mut next: HashMap<&str, i64> = HashMap::new();
        for (p, &(role, gpus)) in placed.iter().zip(instances) {
            assert_eq!(p.role, role.name());
            let index = next.entry(p.role).or_insert(0);
            assert_eq!(p.index, *index);
            *index += 1;
            assert_eq!(p.node, p.nodes[0]);
            assert_eq!(p.devices.len() as i64 * p.nodes.len() as i64, gpus);
            if p.nodes.len() > 1 {
                assert_eq!(p.devices, (0..node).collect::<Vec<_>>());
            }
            for &n in &p.nodes {
                for &d in &p.devices {
                    assert!((0..node).contains(&d), "device {d} of node {n}");
                    assert!(used.insert((n, d)), "device {d} of node {n} used twice");
                }
            }
        }
        used.iter().map(|u| u.0).collect::<HashSet<_>>().len()
    }

    /// Whether `pieces` fit `bins` nodes of `node` GPUs (exhaustive: the test's own answer).
    fn fits(pieces: &mut Vec<i64>, free: &mut Vec<i64>) -> bool {
        let Some(p) = pieces.pop() else { return true };
        for b in 0..free.len() {
            // Bins with the same room are interchangeable: try the first of them only.
            if free[b] >= p && !free[..b].contains(&free[b]) {
                free[b] -= p;
                let ok = fits(pieces, free);
                free[b] += p;
                if ok {
                    pieces.push(p);
                    return true;
                }
            }
        }
        pieces.push(p);
        false
    }

    #[test]
    fn pack_places_a_plan_on_the_fewest_whole_nodes() {
        let sizes = [1, 2, 3, 4, 5, 6, 8, 16];
        for node in [4, 8] {
            for (&a, &b) in sizes.iter().flat_map(|a| sizes.iter().map(move |b| (a, b))) {
                if (a > node && a % node != 0) || (b > node && b % node != 0) {
                    continue;
                }
                for (na, nb) in (1..=4).flat_map(|x| (1..=4).map(move |y| (x, y))) {
                    let mut inst = vec![(Role::Prefill, a); na];
                    inst.extend(vec![(Role::Decode, b); nb]);
                    let placed = pack(&inst, node).expect("a plan of two sizes packs");
                    let nodes = check_pack(&inst, node, &placed);
                    // No packing uses fewer nodes.
                    let mut pieces: Vec<i64> = inst
                        .iter()
                        .flat_map(|&(_, g)| {
                            let (piece, n) = if g > node { (node, g / node) } else { (g, 1) };
                            std::iter::repeat_n(piece, n as usize)
                        })
                        .collect();
                    pieces.sort_unstable();
                    let fewer = nodes - 1;
                    assert!(
                        !fits(&mut pieces, &mut vec![node; fewer]),
                        "{na}x{a} + {nb}x{b} on {node}-GPU nodes: {nodes} nodes, {fewer} hold it"
                    );
                }
            }
        }
    }

    #[test]
    fn pack_is_the_planners_placement_on_whole_nodes() {
        // A plan solved on whole nodes and read back without its placement lands where the
        // planner put it.
        let mut checked = 0;
        for perf in [llama70(), small(4), five(), small_moe()] {
            for count in 1..=3 {
                let sc = scenario(
                    vec![model(perf, &[h100()], workload(), 0.0)],
                    vec![gpu_type("a", Vendor::Nvidia, 30_000)],
                    &[(0, 8, count)],
                    "nixl",
                    Objective::Throughput,
                );
                let c = Candidates::build(sc);
                let order = Order::new(&c);
                let (Some(sol), _) = search(&c, &order, None, true) else {
                    continue;
                };
                let planned = place(&c, &sol, None).expect("a feasible plan places");
                let mut inst = Vec::new();
                for ch in sol.iter().flatten() {
                    for (row, n) in ch.parts() {
                        let r = &c.rows[row];
                        inst.extend(std::iter::repeat_n((r.role, r.gpus()), n as usize));
                    }
                }
                assert_eq!(pack(&inst, 8).expect("packs"), planned);
                checked += 1;
            }
        }
        assert!(checked >= 6, "{checked} plans");
    }

    #[test]
    fn pack_refuses_what_no_node_holds() {
        assert_eq!(pack(&[(Role::Prefill, 1)], 0), Err(PackError::NodeSize(0)));
        let bad = [(Role::Prefill, 4), (Role::Decode, 12)];
        assert_eq!(
            pack(&bad, 8),
            Err(PackError::Instance { index: 1, gpus: 12 })
        );
        assert_eq!(
            pack(&[(Role::Decode, 0)], 8),
            Err(PackError::Instance { index: 0, gpus: 0 })
        );
        assert_eq!(pack(&[], 8), Ok(vec![]));
    }
}
