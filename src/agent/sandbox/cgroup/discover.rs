//! Where this daemon's cgroups are: which hierarchy holds each controller the agents' limits
//! need (`memory`, `pids`, `cpu`), read from `/proc/self/cgroup` and `/proc/self/mountinfo`.
//!
//! Pure parsing, so every layout (cgroup v2 only, v1 only, the hybrid of both, a hierarchy
//! mounted with a non-root root inside a container) is unit-tested from text; the caller reads
//! the two files and the `cgroup.controllers` of the daemon's v2 group.

use std::path::{Path, PathBuf};

/// The controllers the agents' limits use.
pub const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// One line of `/proc/self/cgroup`: `id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The hierarchy id (0 for the unified, v2 hierarchy).
    pub id: u32,
    /// The v1 controllers of the hierarchy (empty for v2; `name=systemd` is kept as is).
    pub controllers: Vec<String>,
    /// The process's group, relative to the hierarchy's root.
    pub path: String,
}

/// Parses `/proc/self/cgroup`; malformed lines are skipped.
pub fn parse_memberships(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?.parse().ok()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            path.starts_with('/').then(|| Membership {
                id,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect(),
                path: path.to_owned(),
            })
        })
        .collect()
}

/// A cgroup file system in `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where it is mounted.
    pub point: PathBuf,
    /// Which group of the hierarchy is its root (not `/` inside a cgroup namespace).
    pub root: String,
    /// `cgroup2` rather than `cgroup`.
    pub v2: bool,
    /// A v1 mount's controllers (from its super options).
    pub controllers: Vec<String>,
}

/// Parses the cgroup mounts out of `/proc/self/mountinfo`; other and malformed lines are
/// skipped.
pub fn parse_mounts(text: &str) -> Vec<CgroupMount> {
    text.lines().filter_map(parse_mount_line).collect()
}

fn parse_mount_line(line: &str) -> Option<CgroupMount> {
    // id parent major:minor root point options [optional fields...] - fstype source super
    let (left, right) = line.split_once(" - ")?;
    let left: Vec<&str> = left.split(' ').collect();
    let right: Vec<&str> = right.split(' ').collect();
    let (root, point) = (left.get(3)?, left.get(4)?);
    let (fstype, options) = (*right.first()?, right.get(2).copied().unwrap_or(""));
    let v2 = match fstype {
        "cgroup2" => true,
        "cgroup" => false,
        _ => return None,
    };
    let controllers = if v2 {
        Vec::new()
    } else {
        options
            .split(',')
            .filter(|o| CONTROLLERS.contains(o) || *o == "cpuacct")
            .map(str::to_owned)
            .collect()
    };
    Some(CgroupMount {
        point: PathBuf::from(unescape(point)),
        root: unescape(root),
        v2,
        controllers,
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Which cgroup version a hierarchy speaks (their files differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The legacy per-controller hierarchies.
    V1,
    /// The unified hierarchy.
    V2,
}

/// The daemon's own group in one hierarchy, and the controllers the agents' limits take from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    /// The hierarchy's version.
    pub version: Version,
    /// The daemon's group, as a path on the host.
    pub dir: PathBuf,
    /// The controllers of [`CONTROLLERS`] that this hierarchy provides.
    pub controllers: Vec<&'static str>,
}

/// Where each controller lives: the v2 hierarchy for those `v2_available` lists (the v2
/// group's `cgroup.controllers`), a v1 hierarchy for the rest. One [`Home`] per hierarchy used;
/// a controller found nowhere is simply absent.
pub fn homes(
    memberships: &[Membership],
    mounts: &[CgroupMount],
    v2_available: &[String],
) -> Vec<Home> {
    let mut out: Vec<Home> = Vec::new();
    let v2_dir = v2_group(memberships, mounts);
    for controller in CONTROLLERS {
        if let Some(dir) = &v2_dir
            && v2_available.iter().any(|c| c == controller)
        {
            add(&mut out, Version::V2, dir, controller);
            continue;
        }
        let found = memberships
            .iter()
            .filter(|m| m.id != 0 && m.controllers.iter().any(|c| c == controller))
            .find_map(|m| {
                let mnt = mounts
                    .iter()
                    .find(|mnt| !mnt.v2 && mnt.controllers.iter().any(|c| c == controller))?;
                group_dir(mnt, &m.path)
            });
        if let Some(dir) = found {
            add(&mut out, Version::V1, &dir, controller);
        }
    }
    out
}

/// The daemon's group in the unified (v2) hierarchy, as a host path, when it has one.
pub fn v2_group(memberships: &[Membership], mounts: &[CgroupMount]) -> Option<PathBuf> {
    let member = memberships
        .iter()
        .find(|m| m.id == 0 && m.controllers.is_empty())?;
    let mount = mounts.iter().find(|mnt| mnt.v2)?;
    group_dir(mount, &member.path)
}

fn add(out: &mut Vec<Home>, version: Version, dir: &Path, controller: &'static str) {
    match out.iter_mut().find(|h| h.dir == dir) {
        Some(home) => home.controllers.push(controller),
        None => out.push(Home {
            version,
            dir: dir.to_path_buf(),
            controllers: vec![controller],
        }),
    }
}

/// The host path of `path` (relative to the hierarchy) under `mount`; `None` when the group is
/// outside what the mount shows.
fn group_dir(mount: &CgroupMount, path: &str) -> Option<PathBuf> {
    let root = mount.root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let rest = rest.trim_start_matches('/');
    if rest.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rest.is_empty() {
        mount.point.clone()
    } else {
        mount.point.join(rest)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_CGROUP: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/ee08\n\
        2:cpuacct:/\n1:cpu:/\n0::/\n";
    const HYBRID_MOUNTS: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 30 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
36 30 0:32 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
40 1 8:1 / / rw,relatime - ext4 /dev/vda rw
";

    #[test]
    fn a_hybrid_machine_takes_each_controller_from_its_v1_hierarchy() {
        let homes = homes(
            &parse_memberships(HYBRID_CGROUP),
            &parse_mounts(HYBRID_MOUNTS),
            &["hugetlb".to_owned()],
        );
        assert_eq!(
            homes,
            vec![
                Home {
                    version: Version::V1,
                    dir: "/sys/fs/cgroup/memory/process_api/ee08".into(),
                    controllers: vec!["memory"],
                },
                Home {
                    version: Version::V1,
                    dir: "/sys/fs/cgroup/pids".into(),
                    controllers: vec!["pids"],
                },
                Home {
                    version: Version::V1,
                    dir: "/sys/fs/cgroup/cpu".into(),
                    controllers: vec!["cpu"],
                },
            ]
        );
    }

    #[test]
    fn a_v2_machine_takes_every_controller_the_group_is_given_from_one_place() {
        let cgroup = "0::/system.slice/air-friends.service/daemon\n";
        let mounts = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let available = ["cpu".to_owned(), "memory".to_owned(), "pids".to_owned()];
        let homes = homes(
            &parse_memberships(cgroup),
            &parse_mounts(mounts),
            &available,
        );
        assert_eq!(
            homes,
            vec![Home {
                version: Version::V2,
                dir: "/sys/fs/cgroup/system.slice/air-friends.service/daemon".into(),
                controllers: vec!["memory", "pids", "cpu"],
            }]
        );
        // Without controllers handed down there is nothing to bound with.
        assert!(homes_of(cgroup, mounts, &[]).is_empty());
    }

    fn homes_of(cgroup: &str, mounts: &str, available: &[String]) -> Vec<Home> {
        homes(&parse_memberships(cgroup), &parse_mounts(mounts), available)
    }

    #[test]
    fn a_namespaced_mount_maps_the_group_below_its_root_and_refuses_one_outside() {
        let mounts = "29 23 0:26 /lxc/box /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let available = ["memory".to_owned()];
        assert_eq!(
            homes_of("0::/lxc/box/app\n", mounts, &available)[0].dir,
            PathBuf::from("/sys/fs/cgroup/app")
        );
        assert!(homes_of("0::/lxc/boxer\n", mounts, &available).is_empty());
        assert!(homes_of("0::/lxc/box/../x\n", mounts, &available).is_empty());
    }

    #[test]
    fn co_mounted_controllers_escaped_points_and_garbage() {
        let mounts = "31 30 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
            32 30 0:28 / /mnt/my\\040groups rw - cgroup cgroup rw,memory,pids\n\
            not a mount line\n33 30 0:29 / /x rw - cgroup\n";
        let parsed = parse_mounts(mounts);
        assert_eq!(parsed[0].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(parsed[1].point, PathBuf::from("/mnt/my groups"));
        assert_eq!(parsed[2].controllers, Vec::<String>::new());
        let homes = homes_of(
            "3:memory,pids:/a\n2:cpu,cpuacct:/b\nbad\n7:x\n",
            mounts,
            &[],
        );
        assert_eq!(homes.len(), 2);
        assert_eq!(homes[0].dir, PathBuf::from("/mnt/my groups/a"));
        assert_eq!(homes[0].controllers, vec!["memory", "pids"]);
        assert_eq!(homes[1].controllers, vec!["cpu"]);
    }
}
