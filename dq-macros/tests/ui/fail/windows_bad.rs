// The key window and max_delay attributes are checked at compile time.
#[dq::delayed_job(unique_for = "0s")]
async fn zero(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(debounce = "soon")]
async fn not_a_duration(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(unique_for = "1h", throttle = "1m")]
async fn two_windows(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(max_delay = "0ms")]
async fn no_delay(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(max_delay = 90)]
async fn not_a_string(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(max_delay = "90d", max_delay = "1d")]
async fn twice(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
