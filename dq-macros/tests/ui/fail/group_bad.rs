// The group attributes are checked at compile time: `group` names a payload field (unquoted),
// `group_concurrency` is at least 1, `group_rate` is a rate such as "10/s".
#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    tenant: String,
}

#[dq::delayed_job(group = "tenant")]
async fn quoted(_o: Order) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(group = customer)]
async fn no_such_field(_o: Order) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(group_concurrency = 0)]
async fn no_room(_o: Order) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(group_rate = "fast")]
async fn not_a_rate(_o: Order) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(group_rate = "0/s")]
async fn zero_rate(_o: Order) -> Result<(), dq::JobError> {
    Ok(())
}

#[dq::delayed_job(group = tenant, group = tenant)]
async fn twice(_o: Order) -> Result<(), dq::JobError> {
    Ok(())
}

fn main() {}
