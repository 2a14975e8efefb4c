use platter_sim::disksim::trace::demerit_ms;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let d = &a[1];
    let mut ds = vec![];
    let mut issue = 0.0;
    for l in std::fs::read_to_string(format!("/tmp/cmp/{d}.exec"))
        .unwrap()
        .lines()
    {
        if l.starts_with("Request issue") {
            issue = l
                .rsplit("time ")
                .next()
                .unwrap()
                .trim()
                .parse::<f64>()
                .unwrap();
        } else if l.starts_with("Request completion") {
            let c: f64 = l
                .split("simtime ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            ds.push(c - issue);
        }
    }
    let mut meas = vec![];
    let mut ours = vec![];
    for l in std::fs::read_to_string(format!("/tmp/cmp/{d}.req"))
        .unwrap()
        .lines()
    {
        if l.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        meas.push(f[4].parse::<f64>().unwrap());
        ours.push(f[5].parse::<f64>().unwrap());
    }
    println!(
        "{d}: demerit(meas, disksim per-request) = {:.6}  demerit(meas, ours) = {:.6}",
        demerit_ms(&meas, &ds),
        demerit_ms(&meas, &ours)
    );
}
