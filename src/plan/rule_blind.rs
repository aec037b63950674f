//! What a planner blind to the connector's pair rules (size rule, replicated-KV-head guard,
//! acks) would deploy: the best plan over the pairs the rules refuse, under the same order
//! and the same nodes. Plans say when it would have been better ("what the rules cost").

use super::candidates::Candidates;
use super::cluster::Fit;
use super::order::{Order, Solution};
use super::relax::best_over;

/// The best plan among rule-refused pairs (single-model planners), None when there is none.
pub fn best_refused(c: &Candidates, order: &Order) -> Option<Solution> {
    best_over(c, order, &c.rejected, Fit::Exact)
}
