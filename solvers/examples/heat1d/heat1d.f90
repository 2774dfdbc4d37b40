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
! Controller mode (as heat1d.c's): --controller DIR runs a policy exported by
! `python -m hpc_refer.export RUN_DIR --out DIR` inside the solver through the Fortran module
! hpc_refer_policy (DIR/hpc_refer_policy.f90 over hpc_refer_policy.c), with no hpc_refer and
! no Python: rank 0 acts on the gathered field and broadcasts the action; each episode's return
! and their mean are printed. --episodes E (default 1), --seed S (default 12345; later
! episodes as after a RESET without a seed: those of python -m hpc_refer.evaluate RUN_DIR
! --seed S against this solver), --horizon H (default 50).
!
! Options: --cells N (default 32, >= ranks), --fault-every K (test aid: in every K-th episode
! rank 0 sends one invalid STATE at step 3, cycling through NaN reward, wrong size, unknown
! status and NaN state, then waits for the RESET that hpc_refer sends after a solver fault).
!
! Build: mpicc -O2 -c POLICY_DIR/hpc_refer_policy.c
!        mpifort -O2 ../../coupling/hpc_refer_client.f90 POLICY_DIR/hpc_refer_policy.f90 \
!          heat1d.f90 hpc_refer_policy.o -o heat1d_f         (or: make heat1d_f)
program heat1d_f
  use mpi
  use hpc_refer_client
  use hpc_refer_policy
  use, intrinsic :: ieee_arithmetic, only: ieee_value, ieee_quiet_nan
  implicit none
  integer, parameter :: n_act = 4, i8 = selected_int_kind(18)
  double precision, parameter :: nu = 0.2d0, dt = 0.1d0, two_pi = 6.283185307179586d0
  type(hpc_refer_t) :: c
  integer :: n, fault_every, m, first, left, right, step, episode, seed, cmd, status, ierr
  integer :: fault, length, horizon, episodes, first_seed, comm, rank, size
  logical :: found
  character(len=32) :: value
  character(len=4096) :: controller
  integer, allocatable :: counts(:), displs(:)
  double precision :: low(n_act), high(n_act), action(n_act), reward, mean_u
  double precision, allocatable :: u(:), next(:), q(:), g(:, :), field(:), bad(:)

  call read_options(n, fault_every, controller, episodes, first_seed, horizon)
  if (len_trim(controller) > 0) then
     call run_controller()
     stop
  end if
  low = -1d0
  high = 1d0
  action = 0d0
  call hpc_refer_init(c, n, n_act, low, high, metrics=['mean_u'])
  call hpc_refer_param(c, 'horizon', value, found)
  if (found) read (value, *) horizon
  call setup(c%comm)
  step = 0

  do
     call hpc_refer_recv_action(c, action, seed, cmd)
     if (cmd == HPC_REFER_STOP) exit
     reward = 0d0
     status = HPC_REFER_CONTINUE
     if (cmd == HPC_REFER_RESET) then
        call reset_field(seed)
        step = 0
     else
        call advance(reward)
        step = step + 1
        if (step >= horizon) status = HPC_REFER_TRUNCATED
     end if
     call gather(mean_u)
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

  !> This rank's block of cells [first, first + m) of the ring over the ranks of comm_in.
  subroutine setup(comm_in)
    integer, intent(in) :: comm_in
    integer :: k, j
    double precision :: x, d
    comm = comm_in
    call MPI_Comm_rank(comm, rank, ierr)
    call MPI_Comm_size(comm, size, ierr)
    allocate (counts(0:size - 1), displs(0:size - 1))
    do k = 0, size - 1
       counts(k) = n / size
       if (k < mod(n, size)) counts(k) = counts(k) + 1
       displs(k) = 0
       if (k > 0) displs(k) = displs(k - 1) + counts(k - 1)
    end do
    m = counts(rank)
    first = displs(rank)
    allocate (u(0:m + 1), next(m), q(m), g(m, n_act), field(n))
    u = 0d0
    do k = 1, m
       x = two_pi * (first + k - 1) / n
       q(k) = 0.5d0 * sin(x) + 0.3d0 * cos(3 * x)
       do j = 1, n_act
          d = modulo(x - two_pi * (j - 0.5d0) / n_act + two_pi / 2, two_pi) - two_pi / 2
          g(k, j) = exp(-0.5d0 * (d / 0.4d0)**2)
       end do
    end do
    left = mod(rank + size - 1, size)
    right = mod(rank + 1, size)
    episode = 0
  end subroutine setup

  !> A new episode's random field (seed -1: none given, as hpc_refer's RESET sends).
  subroutine reset_field(seed_in)
    integer, intent(in) :: seed_in
    integer(i8) :: s
    double precision :: modes(4), x
    integer :: k, j
    s = modulo(int(seed_in, i8) + 7919_i8 * episode + 12345_i8, 2147483646_i8) + 1
    do j = 1, 4
       s = modulo(16807_i8 * s, 2147483647_i8)
       modes(j) = 2d0 * dble(s) / 2147483647d0 - 1d0
    end do
    do k = 1, m
       x = two_pi * (first + k - 1) / n
       u(k) = sum([(0.5d0 * modes(j) * sin(j * x + (j - 1)), j = 1, 4)])
    end do
    episode = episode + 1
  end subroutine reset_field

  !> One step with the action (on every rank): the reward -mean_i u_i^2.
  subroutine advance(r)
    double precision, intent(out) :: r
    double precision :: local, total
    integer :: k
    call MPI_Sendrecv(u(m), 1, MPI_DOUBLE_PRECISION, right, 0, u(0), 1, &
         MPI_DOUBLE_PRECISION, left, 0, comm, MPI_STATUS_IGNORE, ierr)
    call MPI_Sendrecv(u(1), 1, MPI_DOUBLE_PRECISION, left, 1, u(m + 1), 1, &
         MPI_DOUBLE_PRECISION, right, 1, comm, MPI_STATUS_IGNORE, ierr)
    do k = 1, m
       next(k) = u(k) + nu * (u(k - 1) - 2 * u(k) + u(k + 1)) &
            + dt * (q(k) + dot_product(action, g(k, :)))
    end do
    u(1:m) = next
    local = sum(next**2)
    call MPI_Allreduce(local, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, comm, ierr)
    r = -total / n
  end subroutine advance

  !> The whole field on rank 0, and its mean (the step metric mean_u).
  subroutine gather(mean)
    double precision, intent(out) :: mean
    call MPI_Gatherv(u(1:m), m, MPI_DOUBLE_PRECISION, field, counts, displs, &
         MPI_DOUBLE_PRECISION, 0, comm, ierr)
    mean = sum(field) / n
  end subroutine gather

  !> --controller DIR: the exported policy on rank 0 (see the top of this file).
  subroutine run_controller()
    type(hpc_refer_policy_t) :: policy
    character(len=512) :: message
    double precision :: ret, total_return, r
    integer :: code, e, t, dims(2)
    call MPI_Init(ierr)
    call setup(MPI_COMM_WORLD)
    code = HPC_REFER_OK
    if (rank == 0) then
       call hpc_refer_policy_load(policy, controller, code, message)
       if (code == HPC_REFER_OK) then
          dims = [hpc_refer_policy_state_dim(policy), hpc_refer_policy_act_dim(policy)]
          if (dims(1) /= n .or. dims(2) /= n_act) then
             write (message, '(a, i0, a, i0, a, i0, a, i0, a)') 'the policy takes ', dims(1), &
                  ' values and gives ', dims(2), '; this solver has ', n, ' cells and ', n_act, &
                  ' actions'
             code = HPC_REFER_ERR_SHAPE
          end if
       end if
       if (code /= HPC_REFER_OK) print '(a, a, a, i0, a, a)', 'heat1d_f: ', &
            trim(controller), ': error ', code, ': ', trim(message)
    end if
    call MPI_Bcast(code, 1, MPI_INTEGER, 0, comm, ierr)
    total_return = 0d0
    do e = 0, episodes - 1
       if (code /= HPC_REFER_OK) exit
       ret = 0d0
       if (e == 0) then
          call reset_field(first_seed)
       else
          call reset_field(-1)
       end if
       if (rank == 0) call hpc_refer_policy_reset(policy)
       do t = 0, horizon - 1
          call gather(mean_u)
          if (rank == 0) then
             call hpc_refer_policy_act(policy, field, action, code)
             if (code /= HPC_REFER_OK) print '(a, i0, a, i0, a, a)', 'heat1d_f: step ', t, &
                  ': error ', code, ': ', hpc_refer_policy_message(policy)
          end if
          call MPI_Bcast(code, 1, MPI_INTEGER, 0, comm, ierr)
          if (code /= HPC_REFER_OK) exit
          call MPI_Bcast(action, n_act, MPI_DOUBLE_PRECISION, 0, comm, ierr)
          call advance(r)
          ret = ret + r
       end do
       if (code /= HPC_REFER_OK) exit
       if (rank == 0) print '(a, i0, a, es25.17)', 'controller episode ', e, ': return ', ret
       total_return = total_return + ret
    end do
    if (rank == 0 .and. code == HPC_REFER_OK) print '(a, es25.17, a, i0, a)', &
         'controller: mean return ', total_return / episodes, ' over ', episodes, ' episodes'
    if (rank == 0) call hpc_refer_policy_free(policy)
    call MPI_Finalize(ierr)
    if (code /= HPC_REFER_OK) error stop 1
  end subroutine run_controller

  subroutine read_options(cells, every, dir, n_episodes, seed0, steps)
    integer, intent(out) :: cells, every, n_episodes, seed0, steps
    character(len=*), intent(out) :: dir
    character(len=4096) :: name, val
    integer :: k
    cells = 32
    every = 0
    dir = ''
    n_episodes = 1
    seed0 = 12345
    steps = 50
    do k = 1, command_argument_count() - 1, 2
       call get_command_argument(k, name)
       call get_command_argument(k + 1, val)
       if (name == '--cells') read (val, *) cells
       if (name == '--fault-every') read (val, *) every
       if (name == '--controller') dir = val
       if (name == '--episodes') read (val, *) n_episodes
       if (name == '--seed') read (val, *) seed0
       if (name == '--horizon') read (val, *) steps
    end do
  end subroutine read_options

end program heat1d_f
