//! Issue 5, read policies on a real server: `platter read-policy --control`
//! changes the policy of a running mirror (live `status` shows it), the
//! labels keep it across a restart, `serve --rotational` decides what
//! `auto` amounts to, and a volume without copies refuses a policy. With
//! nbdcopy at hand, the volume reads back the same bytes under each policy.

mod e2e_support;

use e2e_support::*;

fn set_policy(s: &Server, policy: &str) -> Out {
    run_ok(
        &mut platter(&["read-policy", "--control", &s.control(), policy]),
        CMD_TIMEOUT,
        &format!("platter read-policy {policy}"),
    )
}

/// `platter read-policy` that must fail, with `message` in its error.
fn refused(s: &Server, policy: &str, message: &str) {
    let out = run(
        &mut platter(&["read-policy", "--control", &s.control(), policy]),
        CMD_TIMEOUT,
    );
    let what = format!("read-policy {policy}");
    assert!(!out.status.success(), "{}", out.describe(&what));
    assert!(out.stderr.contains(message), "{}", out.describe(&what));
}

#[test]
fn read_policy_changes_live_and_persists_across_a_restart() {
    let test = "read_policy_changes_live_and_persists_across_a_restart";
    let volume = Volume::create(Spec::new("mirror", 2, "64k"), 16 * MIB);
    let m1 = volume.members[1].clone();
    // Files cannot say whether they spin: the operator does, once by
    // slot and once by path.
    let options = ServeOptions {
        extra_args: vec![
            "--rotational".into(),
            "0=no".into(),
            "--rotational".into(),
            format!("{m1}=no"),
        ],
        ..ServeOptions::default()
    };
    let mut s = Server::start_with(volume, options);

    let st = live_status(&s);
    assert_eq!(st["read_policy"]["policy"], "auto", "{st}");
    assert_eq!(st["read_policy"]["in_effect"], "load", "{st}");
    assert_eq!(
        st["read_policy"]["rotational"],
        serde_json::json!([false, false])
    );
    let events = st["event_counter"].as_u64().unwrap();

    // Data to read back under each policy, where nbdcopy exists.
    let tools = tools(test, &["nbdcopy", "sha256sum"]);
    let digest = tools.as_ref().map(|t| {
        let image = s.volume.path().join("image");
        write_random_image(&image, s.volume.size_bytes, 0x5eed_0005);
        run_ok(
            t.cmd("nbdcopy").arg(&image).arg(s.uri()),
            CMD_TIMEOUT,
            "nbdcopy the image in",
        );
        let out = run_ok(t.cmd("sha256sum").arg(&image), CMD_TIMEOUT, "sha256sum");
        out.stdout.split_whitespace().next().unwrap().to_string()
    });

    let out = set_policy(&s, "split:256k");
    assert!(
        out.stdout.contains("read policy split:256k"),
        "{}",
        out.describe(test)
    );
    let st = live_status(&s);
    assert_eq!(st["read_policy"]["policy"], "split:256k", "{st}");
    assert_eq!(st["read_policy"]["in_effect"], "split:256k", "{st}");
    assert!(
        st["event_counter"].as_u64().unwrap() > events,
        "{test}: the labels were not rewritten: {st}"
    );
    let human = run_ok(
        &mut platter(&["status", "--control", &s.control()]),
        CMD_TIMEOUT,
        "status",
    );
    assert!(
        human.stdout.contains("Reads:      split:256k"),
        "{}",
        human.describe(test)
    );
    if let (Some(t), Some(d)) = (&tools, &digest) {
        assert_eq!(&volume_sha256(t, s.uri(), test), d, "{test}: under split");
    }

    // Refused, and the policy stays.
    refused(&s, "prefer:7", "there is no slot 7");
    refused(&s, "fastest", "unknown read policy 'fastest'");
    assert_eq!(live_status(&s)["read_policy"]["policy"], "split:256k");

    // The labels keep it: offline status, and a restart.
    s.stop();
    assert_eq!(s.volume.status()["read_policy"], "split:256k");
    s.start_again();
    let st = live_status(&s);
    assert_eq!(st["read_policy"]["policy"], "split:256k", "{st}");
    assert!(s.log().contains("policy=split:256k"), "{test}: {}", s.log());

    // auto follows the members: spinning ones make it proximity.
    set_policy(&s, "auto");
    assert_eq!(live_status(&s)["read_policy"]["in_effect"], "load");
    s.options.extra_args = vec!["--rotational".into(), "1=yes".into()];
    s.restart();
    let st = live_status(&s);
    assert_eq!(st["read_policy"]["policy"], "auto", "{st}");
    assert_eq!(st["read_policy"]["in_effect"], "proximity:1M", "{st}");

    for policy in ["prefer:1", "proximity:4M", "round-robin", "load"] {
        set_policy(&s, policy);
        assert_eq!(live_status(&s)["read_policy"]["policy"], policy);
        if let (Some(t), Some(d)) = (&tools, &digest) {
            assert_eq!(
                &volume_sha256(t, s.uri(), test),
                d,
                "{test}: under {policy}"
            );
        }
    }
    s.restart();
    assert_eq!(live_status(&s)["read_policy"]["policy"], "load");
    s.stop();
    assert_eq!(s.volume.status()["read_policy"], "load");
}

/// How it showed: on raid5 the query printed "auto (in effect:
/// proximity:1M)" while setting one said only mirror and raid10 have read
/// policies. Both now give the same reason.
#[test]
fn a_volume_without_copies_refuses_a_read_policy() {
    let test = "a_volume_without_copies_refuses_a_read_policy";
    let mut s = Server::start(Volume::create(Spec::new("raid5", 3, "64k"), 8 * MIB));
    assert!(live_status(&s)["read_policy"].is_null());
    let why = "raid5 has no copies to choose between: reads go to the member that holds the data";
    let query = run_ok(
        &mut platter(&["read-policy", "--control", &s.control()]),
        CMD_TIMEOUT,
        "read-policy",
    );
    assert_eq!(query.stdout.trim(), why, "{}", query.describe(test));
    let query = run_ok(
        &mut platter(&["read-policy", "--json", "--control", &s.control()]),
        CMD_TIMEOUT,
        "read-policy --json",
    );
    let v: serde_json::Value = serde_json::from_str(&query.stdout).unwrap();
    assert!(v["policy"].is_null() && v["no_copies"] == why, "{v}");
    refused(&s, "load", &format!("read policy load: {why}"));
    // auto too: there is nothing to set.
    refused(&s, "auto", why);
    // create says the same.
    let dir = temp_dir();
    let members = member_paths(dir.path(), 3);
    let mut args = vec![
        "create",
        "--level",
        "stripe",
        "--member-size",
        "8M",
        "--read-policy",
        "round-robin",
    ];
    args.extend(members.iter().map(String::as_str));
    let out = run(&mut platter(&args), CMD_TIMEOUT);
    assert!(!out.status.success(), "{}", out.describe(test));
    assert!(
        out.stderr
            .contains("stripe has no copies to choose between: reads go to the member"),
        "{}",
        out.describe(test)
    );
    s.stop();
}

/// A slot the volume does not have is refused naming the slots it has, in
/// words: a read policy (live and at create), `fail`, `--rotational`. How
/// it showed: `read-policy prefer:9` on a 2-member mirror said "(slots
/// 0..2)", which reads as if slot 2 were one.
#[test]
fn a_slot_it_does_not_have_is_refused_naming_those_it_has() {
    let test = "a_slot_it_does_not_have_is_refused_naming_those_it_has";
    let mut s = Server::start(Volume::create(Spec::new("mirror", 2, "64k"), 8 * MIB));
    let two = "there is no slot 9 (the volume's slots are 0 and 1)";
    refused(&s, "prefer:9", two);
    let out = run(
        &mut platter(&["fail", "--control", &s.control(), "9"]),
        CMD_TIMEOUT,
    );
    assert!(
        !out.status.success() && out.stderr.contains(two),
        "{}",
        out.describe(test)
    );
    s.stop();
    let mut serve = platter(&["serve", "--socket"]);
    serve
        .arg(s.volume.path().join("sock2"))
        .args(["--rotational", "9=yes"])
        .args(&s.volume.members);
    let out = run(&mut serve, CMD_TIMEOUT);
    assert!(
        !out.status.success() && out.stderr.contains(two),
        "{}",
        out.describe(test)
    );
    // create, on three members.
    let dir = temp_dir();
    let members = member_paths(dir.path(), 3);
    let mut args = vec![
        "create",
        "--level",
        "mirror",
        "--member-size",
        "8M",
        "--read-policy",
        "prefer:3",
    ];
    args.extend(members.iter().map(String::as_str));
    let out = run(&mut platter(&args), CMD_TIMEOUT);
    assert!(
        !out.status.success()
            && out
                .stderr
                .contains("there is no slot 3 (the volume's slots are 0 to 2)"),
        "{}",
        out.describe(test)
    );
    assert!(!out.stderr.contains(".."), "{}", out.stderr);
}
