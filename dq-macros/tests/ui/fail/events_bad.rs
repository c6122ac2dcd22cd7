// The events attribute is checked at compile time.
#[dq::delayed_job(events = 0)]
async fn zero(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(events = 20000000)]
async fn too_many(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(events, events = 5)]
async fn twice(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(events = "lots")]
async fn not_a_number(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
