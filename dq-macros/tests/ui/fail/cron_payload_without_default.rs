#[derive(serde::Serialize, serde::Deserialize)]
struct Report {
    day: u32,
}

#[dq::delayed_job(every = "1d")]
async fn report(_report: Report) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
