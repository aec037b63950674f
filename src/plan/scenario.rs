//! The planning question as one typed value: which models (each with its workload, demand
//! and weight), on which GPU pool (types, nodes and their free GPUs), under which connector,
//! limits and objective. Built and validated once by the caller (Python), read by every
//! stage after it: candidate rows, the order, the oracle, the relaxation and the sweep.

use crate::connector::ConnectorProfile;
use crate::layout::Layout;
use crate::layout_rules::{self, LayoutModel};
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

    /// The vendor called `name` (`AMD`/`NVIDIA`, any case).
    pub fn parse(name: &str) -> Option<Vendor> {
        [Vendor::Amd, Vendor::Nvidia]
            .into_iter()
            .find(|v| v.name().eq_ignore_ascii_case(name))
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
    /// vLLM's `max_num_batched_tokens` on this GPU type: the prompt tokens an aggregated
    /// instance mixes into one step.
    pub max_num_batched_tokens: f64,
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
    /// vLLM's model class implements `SupportsPP` (pipeline-parallel layouts load).
    pub supports_pp: bool,
    /// The engine's own memory fraction per GPU type, by instance kind `(tp, dp, pp, role)`,
    /// where it is not the scenario's `gpu_memory_utilization` (SGLang's
    /// `mem_fraction_static`, which depends on the layout and role); empty: the scenario's.
    pub memory_fractions: Vec<MemoryFractions>,
    /// The model has sliding-window attention layers (`check::Shape::sliding_window`).
    pub sliding_window: bool,
    /// DeepSeek-V4's `o_groups` (`LayoutModel::output_groups`; 0: none).
    pub output_groups: i64,
}

/// An engine's memory fraction by `(tp, dp, pp, role)` of one GPU type.
pub type MemoryFractions = std::collections::BTreeMap<(i64, i64, i64, Role), f64>;

impl ModelSpec {
    /// What the layout rules read of this model.
    pub fn layout_model(&self) -> LayoutModel {
        LayoutModel {
            shape: crate::check::Shape {
                sliding_window: self.sliding_window,
                ..self.perf.shape()
            },
            num_layers: self.perf.num_layers as i64,
            num_experts: self.perf.num_experts as i64,
            supports_pp: self.supports_pp,
            output_groups: self.output_groups,
        }
    }

    /// The memory fraction an instance of `layout` in `role` is sized at on GPU type `t`:
    /// the engine's own where one is given, else `scenario_util`.
    pub fn util_for(&self, t: usize, layout: &Layout, role: Role, scenario_util: f64) -> f64 {
        self.memory_fractions
            .get(t)
            .and_then(|f| f.get(&(layout.tp, layout.dp, layout.pp, role)))
            .copied()
            .unwrap_or(scenario_util)
    }

    /// A mixture-of-experts model (expert-parallel layouts apply).
    pub fn is_moe(&self) -> bool {
        self.perf.num_experts > 0.0 && self.perf.expert_weight_bytes > 0.0
    }
}

/// Which instance kinds a plan may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Disaggregated (prefill + decode instances) or aggregated, whichever is best.
    #[default]
    Auto,
    /// Prefill and decode instances, KV moved by the connector.
    Disaggregated,
    /// Instances that do both phases (no KV connector).
    Aggregated,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Disaggregated => "disagg",
            Mode::Aggregated => "agg",
        }
    }

    pub fn disaggregated(self) -> bool {
        self != Mode::Aggregated
    }

    pub fn aggregated(self) -> bool {
        self != Mode::Disaggregated
    }
}

/// Families of layouts the planners build rows for (see [`crate::plan::layouts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    /// Tensor parallel only: tp = 1 ..= the TP bound.
    pub tp: bool,
    /// Tensor parallel with expert parallel (EP size = tp), MoE models.
    pub ep: bool,
    /// Data-parallel attention ranks with expert parallel (EP size = tp × dp), MoE models.
    pub dp: bool,
    /// Pipeline stages (tp × pp GPUs).
    pub pp: bool,
}

/// The layouts to consider: pdtp's default families (`families: None`), chosen families,
/// and/or explicit layouts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LayoutSpace {
    pub families: Option<Families>,
    pub explicit: Vec<Layout>,
}

/// Weights of a re-plan's disruption, each per GPU (see `pdtp.MoveCost`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveCost {
    pub start: f64,
    pub stop: f64,
    pub restart: f64,
    pub gpu: f64,
}

/// Which side of the P/D split a row serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Prefill,
    Decode,
    /// One instance doing both phases (no KV connector).
    Aggregated,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Aggregated => layout_rules::AGGREGATED,
        }
    }

    /// Whether rows of this role carry prefill (`true`) / decode capacity: an aggregated
    /// row carries both.
    pub fn serves(self, side: Role) -> bool {
        self == side || self == Role::Aggregated
    }
}

/// One side of the running deployment a re-plan starts from (an aggregated deployment runs
/// one side: `role` aggregated, and an empty second side). `gpu_type` is `None` when the
/// running type is not in the pool (then nothing running can be kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    pub gpu_type: Option<usize>,
    pub role: Role,
    pub layout: Layout,
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
    /// Disaggregated, aggregated or both.
    pub mode: Mode,
    pub layouts: LayoutSpace,
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
