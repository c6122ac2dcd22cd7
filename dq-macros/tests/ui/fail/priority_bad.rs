// The priority attribute is checked at compile time: 0 (lowest) to 9 (highest).
#[dq::delayed_job(priority = 10)]
async fn too_high(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(priority = -1)]
async fn negative(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(priority = 7, priority = 8)]
async fn twice(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(priority = "high")]
async fn not_a_number(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
