// A retry function is checked at compile time: exclusive with `retry`, `max_attempts` only
// with it and within bounds, and a fn of the right signature.
use dq::{RetryDecision, RetryError};

fn decide(_attempt: u32, _error: &RetryError) -> RetryDecision {
    RetryDecision::Dead
}

fn wrong(_attempt: u64) -> RetryDecision {
    RetryDecision::Dead
}

#[dq::delayed_job(retry = "15s, 3m", retry_fn = decide)]
async fn both(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(max_attempts = 5)]
async fn attempts_alone(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(retry_fn = decide, max_attempts = 0)]
async fn no_attempt(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(retry_fn = decide, max_attempts = 102)]
async fn too_many(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(retry_fn = "decide")]
async fn not_a_path(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(retry_fn = wrong)]
async fn wrong_signature(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
