struct Orders;

impl Orders {
    #[dq::delayed_job]
    async fn close_order(&self, _id: u64) -> Result<(), dq::JobError> {
        Ok(())
    }
}

fn main() {}
