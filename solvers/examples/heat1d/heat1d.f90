! heat1d.f90: the Fortran port of heat1d.c (same physics and episodes, its options but
! --fault-kind), coupled to hpc_refer through solvers/coupling/hpc_refer_client.f90.
!
!   u_i <- u_i + NU (u_{i-1} - 2 u_i + u_{i+1}) + DT (q_i + sum_j a_j g_j(x_i))
!
! on a periodic ring of cells split over the ranks of one environment (one halo value per
! neighbour per step); q: a steady heat source; g_j: N_ACT Gaussian heaters/coolers driven by
! the action a in [-1, 1]^N_ACT; reward = -mean_i u_i^2 (an Allreduce); the state (the whole
! field) is gathered on the environment's rank 0; episodes are truncated after `horizon` steps
! (the run's solver parameter horizon, default 50); one step metric, mean_u (the mean
! temperature), goes with every state.
! The random initial condition uses another generator than heat1d.c (Park-Miller), so the two
! programs draw different initial fields.
!
! Options: --cells N (default 32, >= ranks), --fault-every K (test aid: in every K-th episode
! rank 0 sends one invalid STATE at step 3, cycling through NaN reward, wrong size, unknown
! status and NaN state, then waits for the RESET that hpc_refer sends after a solver fault).
!
! Build: mpifort -O2 ../../coupling/hpc_refer_client.f90 heat1d.f90 -o heat1d_f  (or: make heat1d_f)
program heat1d_f
  use mpi
  use hpc_refer_client
  use, intrinsic :: ieee_arithmetic, only: ieee_value, ieee_quiet_nan
  implicit none
  integer, parameter :: n_act = 4, i8 = selected_int_kind(18)
  double precision, parameter :: nu = 0.2d0, dt = 0.1d0, two_pi = 6.283185307179586d0
  type(hpc_refer_t) :: c
  integer :: n, fault_every, m, first, i, j, left, right, step, episode, seed, cmd, status, ierr
  integer :: fault, length, horizon
  logical :: found
  character(len=32) :: value
  integer, allocatable :: counts(:), displs(:)
  double precision :: low(n_act), high(n_act), action(n_act), modes(4), reward, local, total
  double precision :: x, d, mean_u
  double precision, allocatable :: u(:), next(:), q(:), g(:, :), field(:), bad(:)
  integer(i8) :: s

  call read_options(n, fault_every)
  low = -1d0
  high = 1d0
  action = 0d0
  call hpc_refer_init(c, n, n_act, low, high, metrics=['mean_u'])
  horizon = 50
  call hpc_refer_param(c, 'horizon', value, found)
  if (found) read (value, *) horizon

  ! This rank's block of cells [first, first + m), and counts for the gather.
  allocate (counts(0:c%size - 1), displs(0:c%size - 1))
  do i = 0, c%size - 1
     counts(i) = n / c%size
     if (i < mod(n, c%size)) counts(i) = counts(i) + 1
     displs(i) = 0
     if (i > 0) displs(i) = displs(i - 1) + counts(i - 1)
  end do
  m = counts(c%rank)
  first = displs(c%rank)
  allocate (u(0:m + 1), next(m), q(m), g(m, n_act), field(n))
  u = 0d0
  do i = 1, m
     x = two_pi * (first + i - 1) / n
     q(i) = 0.5d0 * sin(x) + 0.3d0 * cos(3 * x)
     do j = 1, n_act
        d = modulo(x - two_pi * (j - 0.5d0) / n_act + two_pi / 2, two_pi) - two_pi / 2
        g(i, j) = exp(-0.5d0 * (d / 0.4d0)**2)
     end do
  end do
  left = mod(c%rank + c%size - 1, c%size)
  right = mod(c%rank + 1, c%size)
  step = 0
  episode = 0

  do
     call hpc_refer_recv_action(c, action, seed, cmd)
     if (cmd == HPC_REFER_STOP) exit
     reward = 0d0
     status = HPC_REFER_CONTINUE
     if (cmd == HPC_REFER_RESET) then
        s = modulo(int(seed, i8) + 7919_i8 * episode + 12345_i8, 2147483646_i8) + 1
        do j = 1, 4
           s = modulo(16807_i8 * s, 2147483647_i8)
           modes(j) = 2d0 * dble(s) / 2147483647d0 - 1d0
        end do
        do i = 1, m
           x = two_pi * (first + i - 1) / n
           u(i) = sum([(0.5d0 * modes(j) * sin(j * x + (j - 1)), j = 1, 4)])
        end do
        step = 0
        episode = episode + 1
     else
        call MPI_Sendrecv(u(m), 1, MPI_DOUBLE_PRECISION, right, 0, u(0), 1, &
             MPI_DOUBLE_PRECISION, left, 0, c%comm, MPI_STATUS_IGNORE, ierr)
        call MPI_Sendrecv(u(1), 1, MPI_DOUBLE_PRECISION, left, 1, u(m + 1), 1, &
             MPI_DOUBLE_PRECISION, right, 1, c%comm, MPI_STATUS_IGNORE, ierr)
        do i = 1, m
           next(i) = u(i) + nu * (u(i - 1) - 2 * u(i) + u(i + 1)) &
                + dt * (q(i) + dot_product(action, g(i, :)))
        end do
        u(1:m) = next
        local = sum(next**2)
        call MPI_Allreduce(local, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, c%comm, ierr)
        reward = -total / n
        step = step + 1
        if (step >= horizon) status = HPC_REFER_TRUNCATED
     end if
     call MPI_Gatherv(u(1:m), m, MPI_DOUBLE_PRECISION, field, counts, displs, &
          MPI_DOUBLE_PRECISION, 0, c%comm, ierr)
     mean_u = sum(field) / n
     if (fault_every > 0 .and. mod(episode, fault_every) == 0 .and. step == 3) then
        if (c%rank == 0) then  ! test aid: one invalid STATE, then wait for RESET
           fault = mod(episode / fault_every, 4)
           length = 3 + n + 1
           if (fault == 1) length = length + 1
           allocate (bad(length))
           bad = 0d0
           bad(1) = status
           if (fault == 2) bad(1) = 7d0
           bad(2) = step
           bad(3) = reward
           if (fault == 0) bad(3) = ieee_value(1d0, ieee_quiet_nan)
           bad(4:3 + n) = field
           bad(4 + n) = mean_u
           if (fault == 3) bad(4 + n / 2) = ieee_value(1d0, ieee_quiet_nan)
           call MPI_Send(bad, length, MPI_DOUBLE_PRECISION, c%actor, HPC_REFER_TAG_STATE, &
                c%peer, ierr)
           deallocate (bad)
        end if
        cycle
     end if
     call hpc_refer_send_state(c, status, step, reward, field, values=[mean_u])
  end do
  call hpc_refer_finalize(c)

contains

  subroutine read_options(cells, every)
    integer, intent(out) :: cells, every
    character(len=64) :: name, value
    integer :: k
    cells = 32
    every = 0
    do k = 1, command_argument_count() - 1, 2
       call get_command_argument(k, name)
       call get_command_argument(k + 1, value)
       if (name == '--cells') read (value, *) cells
       if (name == '--fault-every') read (value, *) every
    end do
  end subroutine read_options

end program heat1d_f
