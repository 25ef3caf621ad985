// main() of the tests that mpirun starts as several ranks: MPI initialized as the mpirun
// bootstrap does it (MPI_THREAD_SERIALIZED), every rank runs every test, rank 0 reports, and the
// worst verdict of any rank is every rank's exit code.
#include <mpi.h>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) GTEST_FLAG_SET(brief, true);  // one rank reports; the others print failures
  int result = RUN_ALL_TESTS();
  // Every rank's verdict decides the exit code of every rank.
  int any = result;
  MPI_Allreduce(&result, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
