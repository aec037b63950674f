//! The planning core: from a [`Scenario`] (models, GPU pool, workload, connector, limits,
//! objective) to the data every planner decides over, and the references that check them.
//!
//! - [`scenario`]: the question as one typed value;
//! - [`cluster`]: nodes, what fits where, node fill patterns, placement;
//! - [`candidates`]: rows (model × role × GPU type × layout, with capacity) and the pairs
//!   the connector accepts — the one place the performance model is called;
//! - [`order`]: what "best" means, for every planner, once;
//! - [`relax`]: closed forms per pair: CP-SAT's hint and valid relaxation bounds;
//! - [`oracle`]: the exhaustive search tests hold CP-SAT to;
//! - [`prove`]: a single-model proof by enumeration of the few competitive pairs' counts;
//! - [`rule_blind`]: the best plan among pairs the connector refuses;
//! - [`placement`]: where a plan's instances run (nodes and devices);
//! - [`feasible`]: whether a plan meets every constraint (independent of CP-SAT).
//!
//! The CP-SAT model itself is built in Python (`pdtp/planning/cpsat.py`) from these rows,
//! patterns, stages, bounds and hints; it decides.

pub mod candidates;
pub mod cluster;
pub mod feasible;
pub mod layouts;
pub mod oracle;
pub mod order;
pub mod placement;
pub mod prove;
pub mod relax;
pub mod rule_blind;
pub mod scenario;

pub use candidates::{
    side_option, to_units, Candidates, Pair, Role, Row, SideOption, CAPACITY_SCALE,
};
pub use cluster::{Cluster, Item, Pattern};
pub use order::{Choice, Order, Sense, Solution, Stage, Term, Value};
pub use scenario::{
    Families, GpuType, LayoutSpace, MemoryFractions, Mode, ModelSpec, MoveCost, NodeClass,
    Objective, Running, Scenario, Vendor,
};

#[cfg(test)]
pub(crate) mod tests;
