use outbox::Job;

#[derive(Job)]
#[job(kind = "bits")]
union Bits {
    int: u32,
    float: f32,
}

fn main() {}
