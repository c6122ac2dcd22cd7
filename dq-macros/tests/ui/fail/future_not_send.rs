use std::rc::Rc;

async fn save(_id: u64) {}

#[dq::delayed_job]
async fn close_order(id: u64) -> Result<(), dq::JobError> {
    let held = Rc::new(id);
    save(*held).await;
    Ok(())
}

fn main() {}
