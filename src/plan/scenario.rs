//! The planning question as one typed value: which models (each with its workload, demand
//! and weight), on which GPU pool (types, nodes and their free GPUs), under which connector,
//! limits and objective. Built and validated once by the caller (Python), read by every
//! stage after it: candidate rows, the order, the oracle, the relaxation and the sweep.

use crate::connector::ConnectorProfile;
use crate::perf::{Constants, GpuPerf, ModelPerf, Workload};

/// GPU vendor family: decides which connectors may pair different GPU types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    Amd,
    Nvidia,
}

impl Vendor {
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Amd => "AMD",
            Vendor::Nvidia => "NVIDIA",
        }
    }
}

/// One GPU type of the pool.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuType {
    pub name: String,
    pub vendor: Vendor,
    pub constants: Constants,
    /// GPUs per node of this type (an instance's TP group sits inside one node).
    pub node_size: i64,
    /// On-demand price of one GPU-hour in [`PRICE_SCALE`] units of USD (0: unknown).
    pub price: i64,
}

/// Prices are compared in hundredths of a cent per GPU-hour.
pub const PRICE_SCALE: f64 = 1e4;

/// `count` nodes of one GPU type with `free` GPUs free on each (identical nodes are one
/// class, so the models never tell them apart: no symmetry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeClass {
    pub gpu_type: usize,
    pub free: i64,
    pub count: i64,
}

/// One model to serve.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub name: String,
    pub perf: ModelPerf,
    pub workload: Workload,
    /// The GPU numbers per GPU type of the pool (the peak depends on the weight dtype).
    pub gpu_perf: Vec<GpuPerf>,
    /// Requests/s to serve (planners with a demand; 0 otherwise).
    pub demand_rps: f64,
    /// Weight in a shared pool (fleet objectives).
    pub weight: f64,
}

/// Weights of a re-plan's disruption, each per GPU (see `pdtp.MoveCost`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveCost {
    pub start: f64,
    pub stop: f64,
    pub restart: f64,
    pub gpu: f64,
}

/// One side of the running deployment a re-plan starts from. `gpu_type` is `None` when
/// the running type is not in the pool (then nothing running can be kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    pub gpu_type: Option<usize>,
    pub tp: i64,
    pub instances: i64,
}

/// What "best" means. Every variant's order (its lexicographic stages) lives in
/// [`crate::plan::order`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Objective {
    /// Most requests/s served (`solve`).
    Throughput,
    /// Most output tokens per dollar (`solve(objective="tokens_per_dollar")`).
    TokensPerDollar,
    /// Fewest GPUs serving each model's demand (`size_for`).
    FewestGpus,
    /// Fewest $/h serving each model's demand (`objective="cost"`).
    Cost,
    /// Least disruption of a running deployment serving the demand (`replan`).
    Moves {
        weights: MoveCost,
        prefill: Running,
        decode: Running,
    },
    /// Largest smallest served fraction, then the weighted total (`solve_fleet`).
    MaxMin,
    /// Largest weighted total of served fractions (`solve_fleet(objective="weighted")`).
    Weighted,
}

impl Objective {
    /// Whether each model's demand must be served in full.
    pub fn serves_demand(&self) -> bool {
        matches!(
            self,
            Objective::FewestGpus | Objective::Cost | Objective::Moves { .. }
        )
    }

    /// Whether a model may get no instances at all (shared pools).
    pub fn is_fleet(&self) -> bool {
        matches!(self, Objective::MaxMin | Objective::Weighted)
    }
}

/// The whole planning question.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub models: Vec<ModelSpec>,
    pub gpu_types: Vec<GpuType>,
    pub nodes: Vec<NodeClass>,
    pub connector: &'static ConnectorProfile,
    /// Largest TP size (None: each type's node size).
    pub max_tp: Option<i64>,
    pub max_acks: Option<i64>,
    pub gpu_memory_utilization: f64,
    pub objective: Objective,
}

impl Scenario {
    /// GPUs of one type in the pool.
    pub fn gpus_of(&self, t: usize) -> i64 {
        self.nodes
            .iter()
            .filter(|c| c.gpu_type == t)
            .map(|c| c.free.saturating_mul(c.count))
            .fold(0, i64::saturating_add)
    }

    pub fn total_gpus(&self) -> i64 {
        (0..self.gpu_types.len())
            .map(|t| self.gpus_of(t))
            .fold(0, i64::saturating_add)
    }

    /// The largest TP size considered on type `t`.
    pub fn tp_bound(&self, t: usize) -> i64 {
        let node = self.gpu_types[t].node_size;
        self.max_tp.unwrap_or(node).min(self.gpus_of(t)).max(0)
    }

    /// Whether every GPU type of the pool has a price (cost tie-breaks and objectives).
    pub fn priced(&self) -> bool {
        self.gpu_types.iter().all(|g| g.price > 0)
    }
}
