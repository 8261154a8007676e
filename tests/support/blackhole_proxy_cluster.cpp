// BlackholeProxy::ClusterTarget(): the test cluster's socket. Apart from
// blackhole_proxy.cpp, which the benchmarks link without the test cluster.
#include "support/blackhole_proxy.h"
#include "support/test_cluster.h"

namespace akadzed::test {

BlackholeProxy::Target BlackholeProxy::ClusterTarget() {
  return Target::Unix(Cluster().socket_directory().string() + "/.s.PGSQL." +
                      std::to_string(Cluster().port()));
}

}  // namespace akadzed::test
