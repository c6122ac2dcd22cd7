#[dq::delayed_job]
async fn close_order(_id: u64) {}

fn main() {}
