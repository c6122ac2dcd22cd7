struct Db;
struct Mailer;

#[dq::delayed_job(topic = "orders.close", data(Db, Mailer, Db))]
async fn close_order(_id: u64) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
