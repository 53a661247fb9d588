#!/bin/bash
# slurm_carry.sh DIR: this machine's Slurm and munge, gathered into DIR/slurm for a machine that has neither (the lent
# GPU machine: no Slurm, no munge, no -dev packages, no network). tests/gpu/slurm_device.sh starts a cluster from it.
#
#   DIR/slurm/bin      slurmctld slurmd slurmstepd, the client commands, munged munge unmunge
#   DIR/slurm/plugins  the plugins tests/slurm/cluster.sh's config loads (PluginDir=)
#   DIR/slurm/lib      libslurmfull and every shared library the above need, but the C library's own family
#                      (the other machine has its own, newer glibc; mixing two glibc's parts breaks on GLIBC_PRIVATE)
#   DIR/slurm/pmix2    libpmix and its components: Slurm's pmix plugin dlopens it by an absolute path
#                      (PMIX_PREFIX below), which slurm_device.sh mounts this folder over
set -euo pipefail
dir=${1:?usage: slurm_carry.sh DIR}
PLUGIN_SRC=/usr/lib/x86_64-linux-gnu/slurm-wlm
PMIX_PREFIX=/usr/lib/x86_64-linux-gnu/pmix2

# Found by tracing the plugin files the daemons, the steps and the clients open under cluster.sh's config, plus
# the GPU gres (gres_gpu, and gpu_generic since AutoDetect is off) and the cgroup plugins slurmd probes at start.
PLUGINS="accounting_storage_none acct_gather_energy_none acct_gather_filesystem_none acct_gather_interconnect_none
acct_gather_profile_none auth_munge cgroup_v1 cgroup_v2 core_spec_none cred_munge ext_sensors_none gpu_generic gres_gpu
hash_k12 job_container_none jobacct_gather_none jobcomp_none launch_slurm mcs_none mpi_none mpi_pmi2 mpi_pmix
mpi_pmix_v4 power_none preempt_none preempt_partition_prio prep_script priority_basic proctrack_linuxproc
route_default sched_backfill select_cons_res select_cons_tres select_linear serializer_json serializer_url_encoded
serializer_yaml site_factor_none switch_none task_none topology_none"
BINS="/usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmstepd /usr/bin/srun /usr/bin/sbatch /usr/bin/scontrol
/usr/bin/squeue /usr/bin/scancel /usr/bin/sinfo /usr/sbin/munged /usr/bin/munge /usr/bin/unmunge"

for b in $BINS; do [ -x "$b" ] || { echo "slurm_carry.sh: $b missing (apt-get install slurm-wlm munge)" >&2; exit 1; }; done
[ -f "$PMIX_PREFIX/lib/libpmix.so" ] || { echo "slurm_carry.sh: $PMIX_PREFIX/lib/libpmix.so missing (libpmix-dev)" >&2; exit 1; }

out=$dir/slurm
rm -rf "$out"
mkdir -p "$out/bin" "$out/plugins" "$out/lib" "$out/pmix2/lib/pmix" "$out/pmix2/share"
for b in $BINS; do cp -L "$b" "$out/bin/$(basename "$b")"; done # slurmd is a link to slurmd-wlm: keep the plain name
for p in $PLUGINS; do cp -L "$PLUGIN_SRC/$p.so" "$out/plugins/"; done
cp -L "$PLUGIN_SRC/libslurmfull.so" "$out/lib/"
cp -L "$PMIX_PREFIX/lib/libpmix.so" "$out/pmix2/lib/libpmix.so"
cp -L "$PMIX_PREFIX"/lib/pmix/*.so "$out/pmix2/lib/pmix/"
cp -r "$PMIX_PREFIX/share/pmix" "$out/pmix2/share/"

# ldd lists every library a file needs, its libraries' too (it resolves libslurmfull through the RUNPATH here)
glibc='/(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libnss_[a-z]*|libBrokenLocale)\.so|ld-linux'
for f in "$out"/bin/* "$out"/plugins/*.so "$out"/lib/libslurmfull.so "$out"/pmix2/lib/libpmix.so "$out"/pmix2/lib/pmix/*.so; do
    for lib in $(ldd "$f" | awk '/=> \// {print $3}' | grep -v -E "$glibc"); do
        [ -f "$out/lib/$(basename "$lib")" ] || cp -L "$lib" "$out/lib/"
    done
done
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* "$out"/plugins/*.so "$out"/pmix2/lib/*.so "$out"/pmix2/lib/pmix/*.so 2>/dev/null || true
echo "slurm_carry.sh: $(du -sh "$out" | cut -f1) in $out ($(ls "$out/plugins" | wc -l) plugins, $(ls "$out/lib" | wc -l) libraries)"
