//! Whether a plan meets every constraint, checked by code that shares nothing with the
//! CP-SAT model: rows of pairs the connector accepts, instance counts that serve each
//! demand (or at least one of each side), and instances that fit the nodes.

use super::candidates::Candidates;
use super::cluster::TooLarge;
use super::oracle;
use super::order::Solution;

/// Pools up to this many nodes are checked exactly when no closed form packs the plan.
const EXACT_NODES: i64 = 64;

/// `Some(whether the plan is feasible)`; `None` when its instances are too many to check
/// exactly (no closed form packs them and the pool exceeds [`EXACT_NODES`] nodes).
pub fn feasible(c: &Candidates, sol: &Solution) -> Option<bool> {
    for ch in sol.iter().flatten() {
        if !c.pairs.contains(&ch.pair) {
            return Some(false);
        }
        if c.scenario.objective.serves_demand() {
            if ch
                .parts()
                .any(|(r, n)| c.rows[r].need.is_none_or(|need| n < need))
            {
                return Some(false);
            }
        } else if ch.prefill < 1 || ch.decode < 1 {
            return Some(false);
        }
    }
    if !c.scenario.objective.is_fleet() && sol.iter().all(|x| x.is_none()) {
        return Some(false);
    }
    let mut need = Vec::new();
    for ch in sol.iter().flatten() {
        need.extend(ch.parts().map(|(r, n)| (c.rows[r].item.unwrap(), n)));
    }
    match c.cluster.fits(&need) {
        Ok(ok) => Some(ok),
        Err(TooLarge) => (c.cluster.classes.iter().map(|k| k.count).sum::<i64>() <= EXACT_NODES)
            .then(|| oracle::packs(&c.cluster, c, sol)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::tests::{h100, llama70, workload};
    use crate::plan::oracle::search;
    use crate::plan::order::{Choice, Order};
    use crate::plan::scenario::{Objective, Vendor};
    use crate::plan::tests::{five, gpu_type, model, scenario, small};

    fn case(
        connector: &str,
        perf: crate::perf::ModelPerf,
        nodes: &[(usize, i64, i64)],
        objective: Objective,
        demand: f64,
    ) -> Candidates {
        Candidates::build(scenario(
            vec![model(perf, &[h100()], workload(), demand)],
            // MoRIIO's worker starts on AMD GPUs only.
            vec![gpu_type("a", Vendor::Amd, 30_000)],
            nodes,
            connector,
            objective,
        ))
    }

    #[test]
    fn the_oracles_best_plan_is_feasible_and_one_more_instance_is_not() {
        let mut checked = 0;
        for perf in [llama70(), small(4), five()] {
            for nodes in [
                &[(0, 8, 1)][..],
                &[(0, 8, 2), (0, 5, 1)],
                &[(0, 6, 2), (0, 4, 1)],
            ] {
                let c = case("moriio", perf, nodes, Objective::Throughput, 0.0);
                let order = Order::new(&c);
                let (Some(best), true) = search(&c, &order, None, true) else {
                    continue;
                };
                assert_eq!(feasible(&c, &best), Some(true));
                // The oracle is exhaustive: a plan with one more instance of either side
                // that still fit would beat it, so none fits.
                let aggregated = best[0].unwrap().pair.is_aggregated();
                for (p, d) in [(1 << 10, 0), (0, 1 << 10), (1 << 10, 1 << 10)] {
                    if aggregated && p != d {
                        continue; // one row: both counts are its instances
                    }
                    let mut more = best.clone();
                    let ch = more[0].as_mut().unwrap();
                    ch.prefill += p;
                    ch.decode += d;
                    assert_eq!(feasible(&c, &more), Some(false));
                }
                // Nothing at all is no plan for a single-model planner.
                assert_eq!(feasible(&c, &vec![None]), Some(false));
                checked += 1;
            }
        }
        assert!(checked >= 6, "{checked}");
    }

    #[test]
    fn refused_pairs_and_unmet_demand_are_infeasible() {
        // MoRIIO 0.32 refuses P4/D8 of an 8-KV-head model (vLLM's seed error).
        let c = case(
            "moriio@0.32.0",
            llama70(),
            &[(0, 8, 4)],
            Objective::Throughput,
            0.0,
        );
        let p = c
            .rejected
            .first()
            .expect("MoRIIO 0.32 refuses a pair of llama-70b");
        let refused = vec![Some(Choice {
            pair: *p,
            prefill: 1,
            decode: 1,
        })];
        assert_eq!(feasible(&c, &refused), Some(false));
        // A demand planner: counts below a row's need do not serve the demand.
        let c = case("nixl", llama70(), &[(0, 8, 8)], Objective::FewestGpus, 20.0);
        let order = Order::new(&c);
        let (Some(best), _) = search(&c, &order, None, true) else {
            panic!("64 GPUs serve 20 requests/s of llama-70b");
        };
        assert_eq!(feasible(&c, &best), Some(true));
        let mut short = best.clone();
        let ch = short[0].as_mut().unwrap();
        ch.prefill = 0;
        assert_eq!(feasible(&c, &short), Some(false));
    }
}
