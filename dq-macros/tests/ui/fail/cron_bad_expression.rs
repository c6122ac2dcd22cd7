#[dq::delayed_job(cron = "0 */5 * * * * * *")]
async fn report(_unit: ()) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
