struct CloseOrder {
    order_id: u64,
}

#[dq::delayed_job]
async fn close_order(order: CloseOrder) -> Result<(), dq::JobError> {
    let _ = order.order_id;
    Ok(())
}

fn main() {}
