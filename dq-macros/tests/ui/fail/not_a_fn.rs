#[dq::delayed_job]
struct CloseOrder {
    order_id: u64,
}

fn main() {}
