// Does libfabric's shm provider serve an RMA read without the target's CPU? (issue 27, item 2)
// A forked server registers 64 MiB and then either never calls libfabric again ("idle": blocked
// in read() on a pipe), polls its completion queue throughout ("poll"), or polls for 0.3 s and
// then goes idle ("warm"); the client reads 4 KiB pages one at a time (queue depth 1) and
// reports the latency, its CPU, and where it got stuck. Built and run by scripts/shm-rma-probe.sh.
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/select.h>
#define CK(x) do { int _r = (x); if (_r) { fprintf(stderr, "%s: %s\n", #x, fi_strerror(-_r)); exit(1); } } while (0)
struct side { struct fi_info *info; struct fid_fabric *fab; struct fid_domain *dom; struct fid_av *av; struct fid_cq *cq; struct fid_ep *ep; };
static void open_side(struct side *s, const char *prov) {
  struct fi_info *h = fi_allocinfo();
  h->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->fabric_attr->prov_name = strdup(prov);
  CK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &s->info));
  CK(fi_fabric(s->info->fabric_attr, &s->fab, NULL));
  CK(fi_domain(s->fab, s->info, &s->dom, NULL));
  struct fi_av_attr aa = { .type = FI_AV_TABLE };
  CK(fi_av_open(s->dom, &aa, &s->av, NULL));
  struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .size = 64 };
  CK(fi_cq_open(s->dom, &ca, &s->cq, NULL));
  CK(fi_endpoint(s->dom, s->info, &s->ep, NULL));
  CK(fi_ep_bind(s->ep, &s->av->fid, 0));
  CK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
  CK(fi_enable(s->ep));
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double cpu(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6; }
int main(int argc, char **argv) {
  const char *prov = argc > 1 ? argv[1] : "shm"; int poll = argc > 2 && !strcmp(argv[2], "poll"); int warm = argc > 2 && !strcmp(argv[2], "warm");
  int tocli[2], done[2]; pipe(tocli); pipe(done);
  size_t len = 64 << 20;
  pid_t pid = fork();
  if (pid == 0) { // server
    struct side s; open_side(&s, prov);
    char *buf = aligned_alloc(4096, len); memset(buf, 7, len);
    struct fid_mr *mr; CK(fi_mr_reg(s.dom, buf, len, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    char name[256]; size_t nl = sizeof name; CK(fi_getname(&s.ep->fid, name, &nl));
    uint64_t key = fi_mr_key(mr), addr = (uint64_t)buf;
    write(tocli[1], &nl, sizeof nl); write(tocli[1], name, nl); write(tocli[1], &key, 8); write(tocli[1], &addr, 8);
    double c0 = cpu(); char b;
    if (warm) { double w0 = now(); struct fi_cq_entry e; while (now() - w0 < 0.3) fi_cq_read(s.cq, &e, 1); c0 = cpu(); read(done[0], &b, 1); }
    else if (poll) { struct fi_cq_entry e; fcntl_loop: for (;;) { fi_cq_read(s.cq, &e, 1); struct timeval tv = {0,0}; fd_set f; FD_ZERO(&f); FD_SET(done[0], &f); if (select(done[0]+1, &f, 0, 0, &tv) > 0) break; } }
    else read(done[0], &b, 1);
    fprintf(stderr, "server (%s): %.3f s CPU while the client read\n", warm ? "polled 0.3 s, then idle" : poll ? "polling its CQ" : "idle, never calling libfabric", cpu() - c0);
    return 0;
  }
  struct side c; open_side(&c, prov);
  size_t nl; char name[256]; uint64_t key, addr;
  read(tocli[0], &nl, sizeof nl); read(tocli[0], name, nl); read(tocli[0], &key, 8); read(tocli[0], &addr, 8);
  fi_addr_t dst; if (fi_av_insert(c.av, name, 1, &dst, 0, NULL) != 1) { fprintf(stderr, "av_insert failed\n"); return 1; }
  char *lb = aligned_alloc(4096, 4096); struct fid_mr *lmr; CK(fi_mr_reg(c.dom, lb, 4096, FI_READ, 0, 1, 0, &lmr, NULL));
  int n = 20000, ok = 0; double t0 = now(), c0 = cpu(), t_ok = t0, c_ok = c0;
  for (int i = 0; i < n; i++) {
    if (warm && i == 10) { struct timespec z = {0, 500000000}; nanosleep(&z, 0); t0 = t_ok = now(); c0 = c_ok = cpu(); ok = 0; }
    ssize_t r; double p = now(); while ((r = fi_read(c.ep, lb, 4096, fi_mr_desc(lmr), dst, addr + (uint64_t)(i % 16384) * 4096, key, NULL)) == -FI_EAGAIN) { struct fi_cq_entry e; fi_cq_read(c.cq, &e, 1); if (now() - p > 2) { fprintf(stderr, "read %d: not even posted in 2 s (EAGAIN: the target must make progress)\n", i); goto out; } }
    if (r) { fprintf(stderr, "fi_read: %s\n", fi_strerror(-r)); break; }
    struct fi_cq_entry e; double w = now(); ssize_t got;
    while ((got = fi_cq_read(c.cq, &e, 1)) == -FI_EAGAIN) if (now() - w > 2) { fprintf(stderr, "read %d: no completion in 2 s (the target must make progress)\n", i); goto out; }
    if (got < 0) { struct fi_cq_err_entry ee = {0}; fi_cq_readerr(c.cq, &ee, 0); fprintf(stderr, "completion error: %s\n", fi_strerror(ee.err)); goto out; }
    ok++; t_ok = now(); c_ok = cpu();
  }
out:;
  // Up to the last read that completed (a stall is reported above, not averaged in).
  double t = t_ok - t0;
  fprintf(stderr, "client (%s): %d reads of 4 KiB, %.2f us each, client CPU %.2f us each, byte %d\n", prov, ok, ok ? t * 1e6 / ok : 0, ok ? (c_ok - c0) * 1e6 / ok : 0, lb[0]);
  write(done[1], "x", 1); waitpid(pid, NULL, 0);
  return 0;
}
